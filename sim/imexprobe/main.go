// imex-probe is the GPU program of the simulated rack's fake fabric (docs/fake-fabric.md §2): it
// holds the IMEX channels its container was given and asks its node's fabric to export or import GPU
// memory. A hardware-boundary fake: on a real node this is a CUDA program calling the driver.
//
//	imex-probe export --fabric HOST:PORT          export; print the handle, then hold it until SIGTERM
//	imex-probe import --fabric HOST:PORT HANDLE   import; exit 0 if allowed, 1 if refused
//
// It holds every /dev/nvidia-caps-imex-channels/channel* it can see, opened with O_PATH: on simulated
// nodes the channels' major has no kernel driver behind it, so a plain open fails with ENXIO, and an
// O_PATH descriptor is still the process's own proof of the device node (the fabric reads it from
// /proc, never from what the probe says).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"time"
)

// oPath is Linux's O_PATH (octal 010000000 on every architecture we build for); the syscall package
// does not name it, and it is the one constant this program would need golang.org/x/sys for.
const oPath = 0x200000

const usage = "usage: imex-probe export|import --fabric HOST:PORT [--channels DIR] [HANDLE]"

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "export" && os.Args[1] != "import") {
		fail(2, usage)
	}
	op := os.Args[1]
	flags := flag.NewFlagSet(op, flag.ExitOnError)
	fabric := flags.String("fabric", "", "the node's fabric, HOST:PORT")
	channels := flags.String("channels", "/dev/nvidia-caps-imex-channels", "where the IMEX channel devices are")
	_ = flags.Parse(os.Args[2:])
	if *fabric == "" || (op == "import") != (flags.NArg() == 1) || flags.NArg() > 1 {
		fail(2, usage)
	}
	held := holdChannels(*channels)
	fmt.Printf("holding IMEX channels %v\n", held)
	request := map[string]string{"op": op}
	if op == "import" {
		request["handle"] = flags.Arg(0)
	}
	answer := ask(*fabric, request)
	if message, refused := answer["error"]; refused {
		fmt.Printf("fabric: %v\n", message)
		os.Exit(1)
	}
	if op == "import" {
		fmt.Printf("imported %v on IMEX channel %v\n", answer["imported"], answer["channel"])
		return
	}
	fmt.Printf("exported %v on IMEX channel %v\n", answer["handle"], answer["channel"])
	// The export is the process's: it keeps its channels open until it is told to stop.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}

// holdChannels opens every channel device under dir with O_PATH and keeps the descriptors open for
// the life of the process; it returns the names it holds.
func holdChannels(dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "channel*"))
	sort.Strings(paths)
	held := []string{}
	for _, path := range paths {
		if _, err := syscall.Open(path, oPath|syscall.O_CLOEXEC, 0); err != nil {
			fmt.Fprintf(os.Stderr, "imex-probe: cannot hold %s: %v\n", path, err)
			continue
		}
		held = append(held, filepath.Base(path))
	}
	return held
}

// ask sends one request line to the fabric and returns its one answer line, retrying the connection
// for a while: the fabric may still be starting on a node that just booted.
func ask(address string, request map[string]string) map[string]any {
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		if conn, err = net.DialTimeout("tcp", address, 5*time.Second); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		fail(3, fmt.Sprintf("imex-probe: no fabric at %s: %v", address, err))
	}
	defer conn.Close()
	line, _ := json.Marshal(request)
	if _, err := conn.Write(append(line, '\n')); err != nil {
		fail(3, fmt.Sprintf("imex-probe: write to %s: %v", address, err))
	}
	reply, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		fail(3, fmt.Sprintf("imex-probe: read from %s: %v", address, err))
	}
	answer := map[string]any{}
	if err := json.Unmarshal(reply, &answer); err != nil {
		fail(3, fmt.Sprintf("imex-probe: bad answer from %s: %q", address, reply))
	}
	return answer
}

func fail(code int, message string) {
	fmt.Fprintln(os.Stderr, message)
	os.Exit(code)
}
