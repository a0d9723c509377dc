package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// mountHelperArg makes fakecri act as the helper that sets up a container's mount namespace and then
// execs the container command. Go cannot run code between fork and exec, hence the re-exec.
const mountHelperArg = "__mount-helper"

type bindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
	NoSuid   bool   `json:"noSuid,omitempty"`
	NoDev    bool   `json:"noDev,omitempty"`
	// MustExist refuses a missing source, as runc does; kubelet mounts are created when missing.
	MustExist bool `json:"mustExist,omitempty"`
}

type helperSpec struct {
	Mounts  []bindMount  `json:"mounts"`
	Devices []deviceNode `json:"devices"`
	Argv    []string     `json:"argv"`
	Env     []string     `json:"env"`
	Dir     string       `json:"dir"`
}

// helperCommand returns a command that runs spec in a new private mount namespace and process group.
func helperCommand(spec helperSpec) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	encoded, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, mountHelperArg, string(encoded))
	cmd.Env = spec.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Setpgid:      true,
		Pdeathsig:    syscall.SIGKILL, // a dying fakecri takes its "containers" with it
	}
	return cmd, nil
}

func runMountHelper(args []string) {
	fail := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "fakecri mount helper: "+format+"\n", a...)
		os.Exit(127)
	}
	if len(args) != 1 {
		fail("expected one JSON argument")
	}
	var spec helperSpec
	if err := json.Unmarshal([]byte(args[0]), &spec); err != nil {
		fail("decode spec: %v", err)
	}
	// Keep our bind mounts out of the host's mount table.
	if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fail("make / private: %v", err)
	}
	mounts := append([]bindMount{}, spec.Mounts...)
	// Parents before children, so a mount inside another mount's target lands on top of it.
	sort.SliceStable(mounts, func(i, j int) bool {
		return strings.Count(filepath.Clean(mounts[i].Target), "/") < strings.Count(filepath.Clean(mounts[j].Target), "/")
	})
	overlaid := map[string]bool{}
	for _, m := range mounts {
		if err := bind(m, overlaid); err != nil {
			fail("mount %s at %s: %v", m.Source, m.Target, err)
		}
	}
	for _, d := range spec.Devices {
		if err := makeDevice(d, overlaid); err != nil {
			fail("device node %s: %v", d.Path, err)
		}
	}
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			fail("chdir %s: %v", spec.Dir, err)
		}
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		fail("%v", err)
	}
	if err := syscall.Exec(path, spec.Argv, spec.Env); err != nil {
		fail("exec %s: %v", path, err)
	}
}

func bind(m bindMount, overlaid map[string]bool) error {
	info, err := os.Stat(m.Source)
	if os.IsNotExist(err) && !m.MustExist {
		// The kubelet creates DirectoryOrCreate hostPaths itself; a missing plain source is made a dir.
		if err := os.MkdirAll(m.Source, 0o755); err != nil {
			return err
		}
		info, err = os.Stat(m.Source)
	}
	if err != nil {
		return err
	}
	if info.IsDir() {
		if err := os.MkdirAll(m.Target, 0o755); err != nil {
			return err
		}
	} else if err := fileMountPoint(m.Target, overlaid); err != nil {
		return err
	}
	if err := syscall.Mount(m.Source, m.Target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	var flags uintptr
	// The test host's own root (e.g. a chart's default driver root "/") is shared by every simulated
	// node and the machine itself: never let a container write or delete through it.
	if m.ReadOnly || filepath.Clean(m.Source) == "/" {
		flags |= syscall.MS_RDONLY
	}
	if m.NoSuid {
		flags |= syscall.MS_NOSUID
	}
	if m.NoDev {
		flags |= syscall.MS_NODEV
	}
	if flags != 0 {
		flags |= syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_REC
		if err := syscall.Mount("", m.Target, "", flags, ""); err != nil {
			return err
		}
	}
	return nil
}
