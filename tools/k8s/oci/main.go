// Command oci-registry is the local cluster's container registry: go-containerregistry's OCI
// distribution registry (pkg/registry) with its blobs on disk, served over TLS with a certificate of
// the cluster's CA, as an operator's private registry is (docs/registry.md). Manifests and tags live in
// memory: the registry lives as long as the cluster that pushed to it.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	address := flag.String("address", "127.0.0.1:5000", "host:port to listen on")
	blobs := flag.String("blobs", "", "directory for the blobs (required)")
	cert := flag.String("tls-cert", "", "PEM serving certificate (required)")
	key := flag.String("tls-key", "", "PEM key of the serving certificate (required)")
	flag.Parse()
	if *blobs == "" || *cert == "" || *key == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := os.MkdirAll(*blobs, 0o755); err != nil {
		log.Fatal(err)
	}
	handler := registry.New(
		registry.WithBlobHandler(registry.NewDiskBlobHandler(*blobs)),
		registry.Logger(log.New(os.Stderr, "", log.LstdFlags)),
	)
	server := &http.Server{
		Addr:              *address,
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// HTTP/1.1 only: pkg/registry holds one lock while it reads a chunk upload's body, so
		// concurrent uploads multiplexed on one HTTP/2 connection (crane pushes four layers at once)
		// stall the connection's shared flow-control window and deadlock. Over HTTP/1.1 each upload
		// has a connection of its own (docs/registry.md).
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	log.Printf("serving on https://%s, blobs in %s", *address, *blobs)
	if err := server.ListenAndServeTLS(*cert, *key); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
