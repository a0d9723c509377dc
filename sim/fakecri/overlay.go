package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// fileMountPoint makes target exist as a file to bind a file onto, without writing to the host's
// filesystem. A container here has the host's root as its root, so a missing mount point cannot be
// created where a real runtime creates it (in the container's own root filesystem). Creating it on the
// host would leave a stray empty file behind, visible to every container and to the host; for a program
// the base CDI spec mounts (/usr/bin/nvidia-imex) that is a shadow an unmounted container would run.
// Instead the target's directory gets a per-container overlay, in this mount namespace only: the
// host's directory below, a scratch tmpfs above, and the mount point is created in the scratch layer.
// The root directory cannot be overlaid (the container's own mounts hang below it), so a mount point
// directly under / (the chart's /alt-proc-devices) is an empty file on the host, as inOverlay makes
// missing directories there; it shadows nothing a program runs.
func fileMountPoint(target string, overlaid map[string]bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	} else if !os.IsNotExist(err) {
		return err
	}
	if filepath.Dir(target) == "/" {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}
	target, err := inOverlay(target, overlaid)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// inOverlay returns target as the kernel sees it (/bin may be a link to /usr/bin: mounts follow
// links), its directory existing and under a per-container overlay, so that what is created there
// exists in this mount namespace only. Missing parents (a CDI device node's
// /dev/nvidia-caps-imex-channels) are made in the overlay of the nearest directory that exists; directly
// under / they are made on the host, which cannot be overlaid.
func inOverlay(target string, overlaid map[string]bool) (string, error) {
	existing := filepath.Dir(target)
	for existing != "/" {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		existing = filepath.Dir(existing)
	}
	rest, err := filepath.Rel(existing, target)
	if err != nil {
		return "", err
	}
	if existing == "/" {
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return "", err
		}
		existing, rest = filepath.Dir(target), filepath.Base(target)
	}
	dir, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", err
	}
	if !underOverlay(dir, overlaid) {
		if err := overlayDir(dir); err != nil {
			return "", fmt.Errorf("per-container overlay on %s: %w", dir, err)
		}
		overlaid[dir] = true
	}
	target = filepath.Join(dir, rest)
	return target, os.MkdirAll(filepath.Dir(target), 0o755)
}

// underOverlay says whether dir or one of its parents already has this container's overlay: what is
// created there exists in this mount namespace only.
func underOverlay(dir string, overlaid map[string]bool) bool {
	for ; ; dir = filepath.Dir(dir) {
		if overlaid[dir] {
			return true
		}
		if dir == "/" {
			return false
		}
	}
}

// overlayDir stacks an overlay on dir whose lower layer is dir as it is now and whose upper layer is a
// new tmpfs, so files created in dir from now on exist in this mount namespace only. Mounts below dir
// (say /dev/shm under /dev) would be hidden by the overlay; they are bound again on top of it.
func overlayDir(dir string) error {
	if dir == "/" {
		return errors.New("will not overlay the root directory")
	}
	below, err := mountsBelow(dir)
	if err != nil {
		return err
	}
	// Handles on what the overlay is about to cover, so it can still be named afterwards.
	lower, err := openPath(dir)
	if err != nil {
		return err
	}
	defer syscall.Close(lower)
	handles := make([]int, 0, len(below))
	defer func() {
		for _, fd := range handles {
			syscall.Close(fd)
		}
	}()
	for _, m := range below {
		fd, err := openPath(m)
		if err != nil {
			return err
		}
		handles = append(handles, fd)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(lower, &st); err != nil {
		return err
	}
	// The scratch tmpfs goes on dir itself: the overlay then covers it, leaving nothing to clean up.
	if err := syscall.Mount("fakecri-scratch", dir, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("scratch tmpfs: %w", err)
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// The merged directory shows the upper directory's owner and mode: keep the host directory's.
	if err := syscall.Chown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := syscall.Chmod(upper, st.Mode&0o7777); err != nil {
		return err
	}
	options := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", fdPath(lower), upper, work)
	if err := syscall.Mount("overlay", dir, "overlay", 0, options); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	for i, m := range below {
		if err := syscall.Mount(fdPath(handles[i]), m, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s again above the overlay: %w", m, err)
		}
	}
	return nil
}

// openPath opens path as a handle only (O_PATH): a device node is not opened, nothing is read.
func openPath(path string) (int, error) {
	const oPath = 0x200000 // O_PATH on Linux; the syscall package does not name it
	fd, err := syscall.Open(path, oPath|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// mountsBelow lists the mount points strictly below dir that are not below another one of them
// (binding those recursively brings the deeper ones along), in path order.
func mountsBelow(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	prefix := strings.TrimSuffix(filepath.Clean(dir), "/") + "/"
	seen := map[string]bool{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 5 {
			continue
		}
		if point := unescapeMountinfo(fields[4]); strings.HasPrefix(point, prefix) {
			seen[point] = true
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	points := make([]string, 0, len(seen))
	for p := range seen {
		points = append(points, p)
	}
	sort.Strings(points)
	var top []string
	for _, p := range points {
		if len(top) > 0 && strings.HasPrefix(p, top[len(top)-1]+"/") {
			continue
		}
		top = append(top, p)
	}
	return top, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space and so on) in a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
