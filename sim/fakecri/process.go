package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageCommand says how to run a container image as a host process.
type imageCommand struct {
	// Entrypoint is used when the container spec has no command (like an image's ENTRYPOINT).
	Entrypoint []string `json:"entrypoint"`
	// Path entries are prepended to PATH so container commands resolve to host binaries.
	Path []string `json:"path"`
	// Env is added to the container's environment (the container's own values win).
	Env map[string]string `json:"env"`
	// ForceEnv wins over the container's values: e.g. KUBERNETES_SERVICE_HOST/PORT pointing at the
	// loopback apiserver, because the kubernetes Service IP is not routable without kube-proxy.
	ForceEnv map[string]string `json:"forceEnv"`
}

type execConfig struct {
	Images map[string]imageCommand `json:"images"`
}

func loadExecConfig(path string) (map[string]imageCommand, error) {
	if path == "" {
		return map[string]imageCommand{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg execConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Images == nil {
		cfg.Images = map[string]imageCommand{}
	}
	return cfg.Images, nil
}

type containerSpec struct {
	id, sandboxID string
	config        *kubeapi.ContainerConfig
	mounts        []bindMount
	devices       []deviceNode // CDI device nodes, created in the container's overlay of their directory
	cdiEnv        []string     // KEY=VALUE from CDI edits; applied over the container's env, as runtimes do
	logPath       string
}

// hostProcess is one running container process, started through the mount-namespace helper.
type hostProcess struct {
	containerID string
	sandboxID   string
	argv        []string
	launch      helperSpec // reused for exec probes: same mounts, env and working dir
	cmd         *exec.Cmd
	done        chan struct{}
	stopOnce    sync.Once
}

func (p *hostProcess) pid() int { return p.cmd.Process.Pid }

func buildLaunch(spec *containerSpec, image imageCommand) helperSpec {
	argv := append([]string{}, spec.config.GetCommand()...)
	if len(argv) == 0 {
		argv = append(argv, image.Entrypoint...)
	}
	argv = append(argv, spec.config.GetArgs()...)
	env := map[string]string{}
	for k, v := range image.Env {
		env[k] = v
	}
	for _, kv := range spec.config.GetEnvs() {
		env[kv.Key] = string(kv.Value)
	}
	for _, kv := range spec.cdiEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range image.ForceEnv {
		env[k] = v
	}
	pathParts := append([]string{}, image.Path...)
	if p, ok := env["PATH"]; ok {
		pathParts = append(pathParts, p)
	} else {
		pathParts = append(pathParts, os.Getenv("PATH"))
	}
	env["PATH"] = strings.Join(pathParts, ":")
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	dir := spec.config.GetWorkingDir()
	if dir == "" {
		dir = "/"
	}
	return helperSpec{Mounts: spec.mounts, Devices: spec.devices, Argv: argv, Env: envList, Dir: dir}
}

// openContainerLog opens (creating it and its directory) a container's CRI log for appending.
func openContainerLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
}

func startHostProcess(spec *containerSpec, image imageCommand, onExit func(string, int)) (*hostProcess, error) {
	launch := buildLaunch(spec, image)
	if len(launch.Argv) == 0 {
		return nil, errors.New("container has neither a command nor an image entrypoint")
	}
	cmd, err := helperCommand(launch)
	if err != nil {
		return nil, err
	}
	var logFile io.WriteCloser = nopCloser{io.Discard}
	if spec.logPath != "" {
		f, err := openContainerLog(spec.logPath)
		if err != nil {
			return nil, err
		}
		logFile = f
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &hostProcess{
		containerID: spec.id, sandboxID: spec.sandboxID, argv: launch.Argv, launch: launch,
		cmd: cmd, done: make(chan struct{}),
	}
	logs := &criLogWriter{out: logFile}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); logs.pump("stdout", stdout) }()
	go func() { defer pumps.Done(); logs.pump("stderr", stderr) }()
	go func() {
		pumps.Wait()
		err := cmd.Wait()
		logFile.Close()
		code := 0
		if err != nil {
			code = exitCode(err)
		}
		close(p.done)
		onExit(p.containerID, code)
	}()
	return p, nil
}

func exitCode(err error) int {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exitErr.ExitCode()
	}
	return 255
}

// stop sends SIGTERM to the process group, then SIGKILL after the grace period.
func (p *hostProcess) stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	<-p.done
}

// exec runs a command with the container's mounts and environment (probes, kubectl exec).
func (p *hostProcess) exec(ctx context.Context, argv []string, timeout time.Duration) ([]byte, []byte, int) {
	spec := p.launch
	spec.Argv = argv
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd, err := helperCommand(spec)
	if err != nil {
		return nil, []byte(err.Error()), 126
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, []byte(err.Error()), 126
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-waited
		stderr.WriteString("\nfakecri: exec timed out")
	}
	if err != nil {
		return stdout.Bytes(), stderr.Bytes(), exitCode(err)
	}
	return stdout.Bytes(), stderr.Bytes(), 0
}

// criLogWriter writes container output in the CRI log format the kubelet serves to `kubectl logs`.
type criLogWriter struct {
	mu  sync.Mutex
	out io.Writer
}

func (w *criLogWriter) pump(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			tag := "F"
			if !strings.HasSuffix(line, "\n") {
				tag = "P"
				line += "\n"
			}
			w.mu.Lock()
			fmt.Fprintf(w.out, "%s %s %s %s", time.Now().UTC().Format(time.RFC3339Nano), stream, tag, line)
			w.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
