package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

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
	Path     string `yaml:"path"`
	HostPath string `yaml:"hostPath"`
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
