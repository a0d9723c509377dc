"""A real local Kubernetes control plane (etcd, apiserver, kcm, scheduler, kubelets on a fake CRI).

Used by the tests, the rack demo and the benchmarks. It starts the binaries that tools/k8s/build.sh built
into the cache; it never fakes an API component.
"""
