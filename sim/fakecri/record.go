package main

import (
	"encoding/json"
	"os"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recorder appends one JSON object per line to the record file and remembers each container's
// CreateContainer request for as long as the container exists.
type recorder struct {
	mu      sync.Mutex
	file    *os.File
	node    string
	creates map[string]*kubeapi.CreateContainerRequest
}

func newRecorder(path, node string) (*recorder, error) {
	r := &recorder{node: node, creates: map[string]*kubeapi.CreateContainerRequest{}}
	if path == "" {
		return r, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	r.file = f
	return r, nil
}

func (r *recorder) Close() {
	if r.file != nil {
		r.file.Close()
	}
}

func (r *recorder) write(fields map[string]any) {
	fields["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	fields["node"] = r.node
	line, err := json.Marshal(fields)
	if err != nil || r.file == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.file.Write(append(line, '\n'))
}

func (r *recorder) event(name string, fields map[string]any) {
	fields["event"] = name
	r.write(fields)
}

func podFields(fields map[string]any, sandbox *kubeapi.PodSandboxConfig) {
	md := sandbox.GetMetadata()
	fields["pod_namespace"] = md.GetNamespace()
	fields["pod_name"] = md.GetName()
	fields["pod_uid"] = md.GetUid()
}

func (r *recorder) sandbox(name, sandboxID string, cfg *kubeapi.PodSandboxConfig) {
	fields := map[string]any{"event": name, "sandbox_id": sandboxID}
	podFields(fields, cfg)
	r.write(fields)
}

func (r *recorder) createContainer(containerID string, req *kubeapi.CreateContainerRequest, hostProcess bool) {
	r.mu.Lock()
	r.creates[containerID] = req
	r.mu.Unlock()
	cfg := req.GetConfig()
	cdi := []string{}
	for _, d := range cfg.GetCDIDevices() {
		cdi = append(cdi, d.GetName())
	}
	envs := map[string]string{}
	for _, kv := range cfg.GetEnvs() {
		envs[kv.GetKey()] = string(kv.GetValue())
	}
	mounts := []map[string]any{}
	for _, m := range cfg.GetMounts() {
		mounts = append(mounts, map[string]any{
			"container_path": m.GetContainerPath(), "host_path": m.GetHostPath(), "readonly": m.GetReadonly(),
		})
	}
	raw, _ := protojson.Marshal(req)
	fields := map[string]any{
		"event": "CreateContainer", "container_id": containerID, "sandbox_id": req.GetPodSandboxId(),
		"container_name": cfg.GetMetadata().GetName(), "image": cfg.GetImage().GetImage(),
		"host_process": hostProcess, "cdi_devices": cdi, "envs": envs, "mounts": mounts,
		"command": cfg.GetCommand(), "args": cfg.GetArgs(), "log_path": containerLogPath(req),
		"request": json.RawMessage(raw),
	}
	podFields(fields, req.GetSandboxConfig())
	r.write(fields)
}

func (r *recorder) lookupCreate(containerID string) (*kubeapi.CreateContainerRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	req, ok := r.creates[containerID]
	return req, ok
}

func (r *recorder) forget(containerID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.creates, containerID)
}
