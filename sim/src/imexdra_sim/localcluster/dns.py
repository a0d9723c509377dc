"""Cluster DNS of containerd clusters: CoreDNS as a Deployment on the control-plane node, as kubeadm has it.

Pods on containerd nodes live in network namespaces of their own and resolve Services by name the way
they do on a real cluster: the kubelet writes ``nameserver 10.0.0.10`` (the ``kube-dns`` Service) and
the ``<ns>.svc.cluster.local`` search path into each pod's ``/etc/resolv.conf``; kube-proxy sends the
query to CoreDNS, which answers from the API (its ``kubernetes`` plugin, with the RBAC kubeadm gives
it). The image is the binary tools/k8s/build.sh builds from CoreDNS's Go module, packed by
tools/image/build.sh. The Corefile is kubeadm's default without ``forward``: these machines have no
upstream resolver a pod could reach, so names outside ``cluster.local`` are refused rather than sent
nowhere (docs/node-runtime.md, "Cluster DNS").
"""

from __future__ import annotations

from typing import Any

CLUSTER_DNS_IP = "10.0.0.10"
"""The ``kube-dns`` Service's ClusterIP (inside the cluster's Service CIDR) and the kubelets' clusterDNS."""
CLUSTER_DOMAIN = "cluster.local"
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.15.0"
"""tools/image/build.sh's CoreDNS image (COREDNS_VERSION in tools/k8s/versions.env)."""
NAMESPACE = "kube-system"
CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
"""The label and the NoSchedule taint a control-plane node carries (kubeadm, kind)."""

COREFILE = f""".:53 {{
    errors
    health {{
       lameduck 5s
    }}
    ready
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }}
    prometheus :9153
    cache 30
    loop
    reload
    loadbalance
}}
"""

_LABELS = {"k8s-app": "kube-dns"}


def manifests() -> list[dict[str, Any]]:
    """CoreDNS's ServiceAccount, RBAC, Corefile, Deployment and the ``kube-dns`` Service."""
    meta = {"name": "coredns", "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", **meta}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        _deployment(meta),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": _LABELS},
            "spec": {
                "selector": _LABELS,
                "clusterIP": CLUSTER_DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                    {"name": "metrics", "port": 9153, "protocol": "TCP"},
                ],
            },
        },
    ]


def _deployment(meta: dict[str, str]) -> dict[str, Any]:
    """The CoreDNS Deployment as kubeadm writes it, one replica, pinned to the control-plane node."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**meta, "labels": _LABELS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _LABELS},
            "template": {
                "metadata": {"labels": _LABELS},
                "spec": {
                    "serviceAccountName": "coredns",
                    "priorityClassName": "system-cluster-critical",
                    # Its own resolver is the node's; ClusterFirst would point CoreDNS at itself.
                    "dnsPolicy": "Default",
                    "nodeSelector": {CONTROL_PLANE_ROLE: ""},
                    "tolerations": [
                        {"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": CONTROL_PLANE_ROLE, "effect": "NoSchedule"},
                    ],
                    "containers": [
                        {
                            "name": "coredns",
                            "image": COREDNS_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "args": ["-conf", "/etc/coredns/Corefile"],
                            "ports": [
                                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                {"name": "metrics", "containerPort": 9153, "protocol": "TCP"},
                            ],
                            "volumeMounts": [
                                {"name": "config", "mountPath": "/etc/coredns", "readOnly": True}
                            ],
                            "livenessProbe": {
                                "httpGet": {"path": "/health", "port": 8080},
                                "periodSeconds": 10,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/ready", "port": 8181},
                                "periodSeconds": 2,
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                            },
                        }
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                },
            },
        },
    }
