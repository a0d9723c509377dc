package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

// pathRewrite maps a host path prefix as the pod spec names it to where it lives for this node.
type pathRewrite struct{ from, to string }

// runtime overrides the fake's container calls for host-process images and records every call.
type runtime struct {
	*fake.RemoteRuntime
	images   map[string]imageCommand
	pathMap  []pathRewrite
	recorder *recorder

	mu      sync.Mutex
	procs   map[string]*hostProcess // by container ID
	podIPs  *podIPs
	cdiDirs []string // node-local CDI spec dirs; empty disables CDI resolution
}

func (r *runtime) rewrite(hostPath string) string {
	for _, m := range r.pathMap {
		if hostPath == m.from || strings.HasPrefix(hostPath, m.from+"/") {
			return m.to + strings.TrimPrefix(hostPath, m.from)
		}
	}
	return hostPath
}

func (r *runtime) RunPodSandbox(ctx context.Context, req *kubeapi.RunPodSandboxRequest) (*kubeapi.RunPodSandboxResponse, error) {
	resp, err := r.podIPs.runSandbox(func() (*kubeapi.RunPodSandboxResponse, error) {
		return r.RemoteRuntime.RunPodSandbox(ctx, req)
	})
	if err == nil {
		r.recorder.sandbox("RunPodSandbox", resp.PodSandboxId, req.Config)
	}
	return resp, err
}

func (r *runtime) StopPodSandbox(ctx context.Context, req *kubeapi.StopPodSandboxRequest) (*kubeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	var victims []*hostProcess
	for _, p := range r.procs {
		if p.sandboxID == req.PodSandboxId {
			victims = append(victims, p)
		}
	}
	r.mu.Unlock()
	for _, p := range victims {
		p.stop(10 * time.Second)
	}
	r.recorder.event("StopPodSandbox", map[string]any{"sandbox_id": req.PodSandboxId})
	return r.RemoteRuntime.StopPodSandbox(ctx, req)
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	if len(r.cdiDirs) > 0 {
		if _, err := resolveCDI(r.cdiDirs, cdiNames(req.Config)); err != nil {
			r.recorder.event("CreateContainerFailed", map[string]any{
				"container_name": req.Config.GetMetadata().GetName(), "error": err.Error(),
			})
			return nil, err
		}
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	// Report the log path as real runtimes do. The kubelet removes "<status.logPath>*" when it removes a
	// container: with the fake's empty path that glob is "*" in the kubelet's working directory.
	rs := r.RemoteRuntime.RuntimeService
	rs.Lock()
	if c, ok := rs.Containers[resp.ContainerId]; ok {
		c.LogPath = containerLogPath(req)
		if c.LogPath == "" {
			c.LogPath = filepath.Join(os.DevNull, "no-log") // never exists, so globs to nothing
		}
	}
	rs.Unlock()
	_, hostProc := r.images[req.Config.GetImage().GetImage()]
	r.recorder.createContainer(resp.ContainerId, req, hostProc)
	return resp, nil
}

func (r *runtime) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	status, err := r.RemoteRuntime.ContainerStatus(ctx, &kubeapi.ContainerStatusRequest{ContainerId: req.ContainerId})
	if err != nil {
		return nil, err
	}
	cmd, ok := r.images[status.Status.GetImage().GetImage()]
	if !ok {
		// An in-memory container writes nothing, but has a log like any container: `kubectl logs` works.
		if path := status.Status.GetLogPath(); filepath.IsAbs(path) {
			if f, err := openContainerLog(path); err == nil {
				f.Close()
			}
		}
		return r.RemoteRuntime.StartContainer(ctx, req)
	}
	spec, err := r.containerSpec(req.ContainerId)
	if err != nil {
		return nil, err
	}
	proc, err := startHostProcess(spec, cmd, r.onExit)
	if err != nil {
		r.recorder.event("StartContainerFailed", map[string]any{"container_id": req.ContainerId, "error": err.Error()})
		return nil, fmt.Errorf("start host process for %s: %w", req.ContainerId, err)
	}
	r.mu.Lock()
	r.procs[req.ContainerId] = proc
	r.mu.Unlock()
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	r.recorder.event("StartContainer", map[string]any{
		"container_id": req.ContainerId, "pid": proc.pid(), "argv": proc.argv,
	})
	return resp, err
}

// containerSpec gathers what a host process needs from the fake's record of the container.
func (r *runtime) containerSpec(containerID string) (*containerSpec, error) {
	create, ok := r.recorder.lookupCreate(containerID)
	if !ok {
		return nil, fmt.Errorf("no CreateContainer request recorded for %s", containerID)
	}
	spec := &containerSpec{id: containerID, sandboxID: create.PodSandboxId, config: create.Config}
	for _, m := range create.Config.GetMounts() {
		spec.mounts = append(spec.mounts, bindMount{
			Source: r.rewrite(m.HostPath), Target: m.ContainerPath, ReadOnly: m.Readonly,
		})
	}
	if len(r.cdiDirs) > 0 {
		edits, err := resolveCDI(r.cdiDirs, cdiNames(create.Config))
		if err != nil {
			return nil, err
		}
		spec.cdiEnv = edits.Env
		// As runc applies a CDI mount: the source must exist, and its options hold.
		for _, m := range edits.Mounts {
			spec.mounts = append(spec.mounts, bindMount{
				Source: r.rewrite(m.HostPath), Target: m.ContainerPath, ReadOnly: hasOption(m.Options, "ro"),
				NoSuid: hasOption(m.Options, "nosuid"), NoDev: hasOption(m.Options, "nodev"), MustExist: true,
			})
		}
		// Device nodes are created in the container (mknod), as runc does in a container's /dev.
		for _, d := range edits.DeviceNodes {
			node, err := resolveDeviceNode(d, r.rewrite)
			if err != nil {
				return nil, err
			}
			spec.devices = append(spec.devices, node)
		}
	}
	spec.logPath = containerLogPath(create)
	return spec, nil
}

// containerLogPath is where the kubelet expects the container's CRI log, or "" if it asked for none.
func containerLogPath(req *kubeapi.CreateContainerRequest) string {
	dir, name := req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath()
	if !filepath.IsAbs(dir) || name == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

// onExit marks a host-process container exited in the fake, so the kubelet sees it die and restarts it.
func (r *runtime) onExit(containerID string, exitCode int) {
	rs := r.RemoteRuntime.RuntimeService
	rs.Lock()
	if c, ok := rs.Containers[containerID]; ok && c.State == kubeapi.ContainerState_CONTAINER_RUNNING {
		c.State = kubeapi.ContainerState_CONTAINER_EXITED
		c.ExitCode = int32(exitCode)
		c.FinishedAt = time.Now().UnixNano()
		c.Reason = "Error"
		if exitCode == 0 {
			c.Reason = "Completed"
		}
	}
	rs.Unlock()
	r.recorder.event("ContainerExited", map[string]any{"container_id": containerID, "exit_code": exitCode})
}

func (r *runtime) StopContainer(ctx context.Context, req *kubeapi.StopContainerRequest) (*kubeapi.StopContainerResponse, error) {
	r.mu.Lock()
	proc := r.procs[req.ContainerId]
	r.mu.Unlock()
	if proc != nil {
		grace := time.Duration(req.Timeout) * time.Second
		proc.stop(grace)
	}
	r.recorder.event("StopContainer", map[string]any{"container_id": req.ContainerId})
	return r.RemoteRuntime.StopContainer(ctx, req)
}

func (r *runtime) RemoveContainer(ctx context.Context, req *kubeapi.RemoveContainerRequest) (*kubeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	proc := r.procs[req.ContainerId]
	delete(r.procs, req.ContainerId)
	r.mu.Unlock()
	if proc != nil {
		proc.stop(0)
	}
	r.recorder.forget(req.ContainerId)
	r.recorder.event("RemoveContainer", map[string]any{"container_id": req.ContainerId})
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

// ExecSync runs probes and `kubectl exec`-style commands for host-process containers for real.
func (r *runtime) ExecSync(ctx context.Context, req *kubeapi.ExecSyncRequest) (*kubeapi.ExecSyncResponse, error) {
	r.mu.Lock()
	proc := r.procs[req.ContainerId]
	r.mu.Unlock()
	if proc == nil {
		return r.RemoteRuntime.ExecSync(ctx, req)
	}
	timeout := time.Duration(req.Timeout) * time.Second
	if timeout <= 0 {
		timeout = time.Minute
	}
	stdout, stderr, code := proc.exec(ctx, req.Cmd, timeout)
	return &kubeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: int32(code)}, nil
}

func cdiNames(config *kubeapi.ContainerConfig) []string {
	names := make([]string, 0, len(config.GetCDIDevices()))
	for _, d := range config.GetCDIDevices() {
		names = append(names, d.GetName())
	}
	return names
}

func hasOption(options []string, want string) bool {
	for _, o := range options {
		if o == want {
			return true
		}
	}
	return false
}

func (r *runtime) killAll() {
	r.mu.Lock()
	procs := make([]*hostProcess, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.stop(5 * time.Second)
	}
}
