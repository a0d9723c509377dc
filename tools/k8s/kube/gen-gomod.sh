#!/usr/bin/env bash
# Regenerates kube/go.mod: k8s.io/kubernetes plus a replace for every staging module (it requires
# them at v0.0.0, which only resolves through replaces). Run after changing versions.env, then `go mod tidy`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../versions.env
source "$here/../versions.env"
staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api cri-client
cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
sample-apiserver sample-cli-plugin sample-controller streaming"
{
  echo "module imexdra.local/k8sbin"
  echo
  echo "go 1.26.0"
  echo
  echo "require k8s.io/kubernetes v$KUBE_VERSION"
  echo
  echo "tool ("
  for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
    echo "	k8s.io/kubernetes/cmd/$c"
  done
  echo ")"
  echo
  echo "replace ("
  for m in $staging; do echo "	k8s.io/$m => k8s.io/$m v$STAGING_VERSION"; done
  echo ")"
} > "$here/go.mod"
