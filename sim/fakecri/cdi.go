package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"gopkg.in/yaml.v3"
)

// The runtime's half of CDI (as containerd does it): resolve every CDI device the kubelet asks for
// against the spec files in the node's CDI directories, refuse containers whose devices cannot be
// resolved, and apply the edits (env, mounts, device nodes) to host-process containers.

type cdiEdits struct {
	Env         []string        `yaml:"env"`
	Mounts      []cdiMount      `yaml:"mounts"`
	DeviceNodes []cdiDeviceNode `yaml:"deviceNodes"`
}

type cdiMount struct {
	HostPath      string   `yaml:"hostPath"`
	ContainerPath string   `yaml:"containerPath"`
	Options       []string `yaml:"options"`
}

type cdiDeviceNode struct {
	Path     string  `yaml:"path"`
	HostPath string  `yaml:"hostPath"`
	Type     string  `yaml:"type"`
	Major    int64   `yaml:"major"`
	Minor    int64   `yaml:"minor"`
	FileMode *uint32 `yaml:"fileMode"`
}

// deviceNode is a device node the mount helper creates in a container, as runc creates a CDI device
// node in the container's /dev.
type deviceNode struct {
	Path  string `json:"path"`
	Block bool   `json:"block"`
	Major uint64 `json:"major"`
	Minor uint64 `json:"minor"`
	Mode  uint32 `json:"mode"`
}

// resolveDeviceNode fills in a CDI device node as the CDI library does before the runtime creates it:
// type, major and minor as the spec gives them when it gives all three, else from the host path (here
// the node's copy of it, through rewrite); the mode from the spec, else the host file's, else 0666.
func resolveDeviceNode(d cdiDeviceNode, rewrite func(string) string) (deviceNode, error) {
	node := deviceNode{Path: d.Path, Block: d.Type == "b", Major: uint64(d.Major), Minor: uint64(d.Minor), Mode: 0o666}
	if d.Type == "" || (d.Major == 0 && d.Minor == 0) {
		host := d.HostPath
		if host == "" {
			host = d.Path
		}
		var st syscall.Stat_t
		if err := syscall.Stat(rewrite(host), &st); err != nil {
			return node, fmt.Errorf("CDI device node %s: stat %s: %w", d.Path, host, err)
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFCHR, syscall.S_IFBLK:
		default:
			return node, fmt.Errorf("CDI device node %s: %s is not a device", d.Path, host)
		}
		rdev := st.Rdev
		node.Block = st.Mode&syscall.S_IFMT == syscall.S_IFBLK
		node.Major = (rdev>>8)&0xfff | (rdev>>32)&^0xfff
		node.Minor = rdev&0xff | (rdev>>12)&^0xff
		node.Mode = st.Mode & 0o777
	}
	if d.FileMode != nil {
		node.Mode = *d.FileMode & 0o777
	}
	return node, nil
}

// makeDevice creates node in the container, in this mount namespace's overlay of its directory.
func makeDevice(node deviceNode, overlaid map[string]bool) error {
	target, err := inOverlay(node.Path, overlaid)
	if err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return err
	}
	kind := uint32(syscall.S_IFCHR)
	if node.Block {
		kind = syscall.S_IFBLK
	}
	dev := (node.Major&0xfff)<<8 | (node.Major&^0xfff)<<32 | node.Minor&0xff | (node.Minor&^0xff)<<12
	if err := syscall.Mknod(target, kind|node.Mode, int(dev)); err != nil {
		return err
	}
	return os.Chmod(target, os.FileMode(node.Mode)) // the helper's umask took bits off
}

type cdiSpec struct {
	CDIVersion     string   `yaml:"cdiVersion"`
	Kind           string   `yaml:"kind"`
	ContainerEdits cdiEdits `yaml:"containerEdits"`
	Devices        []struct {
		Name           string   `yaml:"name"`
		ContainerEdits cdiEdits `yaml:"containerEdits"`
	} `yaml:"devices"`
}

// resolveCDI returns the merged edits for fully-qualified device names like "vendor/class=name".
func resolveCDI(dirs []string, names []string) (cdiEdits, error) {
	var merged cdiEdits
	if len(names) == 0 {
		return merged, nil
	}
	specs, err := loadCDISpecs(dirs)
	if err != nil {
		return merged, err
	}
	var unresolved []string
	appliedSpec := map[*cdiSpec]bool{}
	for _, name := range names {
		kind, device, ok := strings.Cut(name, "=")
		found := false
		for _, spec := range specs {
			if !ok || spec.Kind != kind {
				continue
			}
			for _, d := range spec.Devices {
				if d.Name != device {
					continue
				}
				found = true
				if !appliedSpec[spec] {
					merged = mergeEdits(merged, spec.ContainerEdits)
					appliedSpec[spec] = true
				}
				merged = mergeEdits(merged, d.ContainerEdits)
			}
		}
		if !found {
			unresolved = append(unresolved, name)
		}
	}
	if len(unresolved) > 0 {
		return merged, fmt.Errorf("unresolvable CDI devices %s", strings.Join(unresolved, ", "))
	}
	return merged, nil
}

func loadCDISpecs(dirs []string) ([]*cdiSpec, error) {
	var specs []*cdiSpec
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if !e.IsDir() && (ext == ".yaml" || ext == ".json") && !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			data, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				return nil, err
			}
			spec := &cdiSpec{}
			if err := yaml.Unmarshal(data, spec); err != nil { // JSON is YAML too
				return nil, fmt.Errorf("CDI spec %s: %w", filepath.Join(dir, n), err)
			}
			specs = append(specs, spec)
		}
	}
	return specs, nil
}

func mergeEdits(into, from cdiEdits) cdiEdits {
	into.Env = append(into.Env, from.Env...)
	into.Mounts = append(into.Mounts, from.Mounts...)
	into.DeviceNodes = append(into.DeviceNodes, from.DeviceNodes...)
	return into
}
