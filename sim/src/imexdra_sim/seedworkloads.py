"""The seeds' workloads as their documents print them, so the demo and the tests run them unchanged.

``MPIJOB`` is CoreWeave's GB200 example (an MPIJob across a full NVL72 rack: 18 workers x 4 GPUs, the
launcher's and workers' cpu/memory requests, the clique pod affinity), character for character; the
one placeholder the document asks the reader to fill, the claim template name, is filled by
:func:`mpijob`. ``COMPUTE_DOMAIN_0`` and ``DEPLOYMENT`` are the ComputeDomain and the 18-replica
Deployment with the ``cd-0`` claim of NVIDIA's introduction to ComputeDomains, comments included (the
post prints them without indentation; the structure is the one its text describes).
docs/local-cluster.md §2, "The seed workloads, as written", says where each comes from. The simulated
nodes are GB200 trays to the kubelet (``localcluster.machine``), so these requests are scheduled and
admitted as on a real rack. Where the demo must differ (fewer workers on a smaller rack), it says so
there too.
"""

from __future__ import annotations

from typing import Any

import yaml

TEMPLATE_PLACEHOLDER = "[IMEX-CHANNEL-TEMPLATE-NAME]"
IMAGE = "ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163"
"""The seed MPIJob's image (the rack's runtime runs a stand-in under this name, tools/image/build.sh)."""

MPIJOB = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: dra-example-gb200-4x
spec:
  slotsPerWorker: 4
  runPolicy:
    cleanPodPolicy: Running
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
            - image: ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163
              name: mpi-launcher
              securityContext:
                runAsUser: 1000
              command: ["/bin/bash", "-c"]
              args:
                - sleep infinity
              resources:
                requests:
                  cpu: 2
                  memory: 128Mi
    Worker:
      replicas: 18
      template:
        metadata:
          labels:
            app: nvbandwidth-test-worker
        spec:
          resourceClaims:
          - name: imex-channel
            resourceClaimTemplateName: [IMEX-CHANNEL-TEMPLATE-NAME]
          containers:
            - image: ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163
              name: nccl
              securityContext:
                privileged: false
              resources:
                claims:
                - name: imex-channel
                requests:
                  cpu: 110
                  memory: 960Gi
                  nvidia.com/gpu: 4
                limits:
                  memory: 960Gi
                  nvidia.com/gpu: 4
              volumeMounts:
                - mountPath: /dev/shm
                  name: dshm
          affinity:
            podAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
              - labelSelector:
                  matchExpressions:
                  - key: app
                    operator: In
                    values:
                    - nvbandwidth-test-worker
                topologyKey: nvidia.com/gpu.clique
          volumes:
            - emptyDir:
                medium: Memory
              name: dshm
"""
"""CoreWeave's GB200 MPIJob, with its placeholder."""

RACK_WORKERS = 18
"""Workers of the seed MPIJob: one per tray of a full rack."""


def mpijob(template: str, *, namespace: str, workers: int = RACK_WORKERS) -> dict[str, Any]:
    """CoreWeave's GB200 MPIJob using claim template ``template``.

    ``namespace`` is where ``kubectl apply -n`` would put it; ``workers`` is below 18 only for racks of
    fewer trays.
    """
    job: dict[str, Any] = yaml.safe_load(MPIJOB.replace(TEMPLATE_PLACEHOLDER, template))
    job["metadata"]["namespace"] = namespace
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    return job


COMPUTE_DOMAIN_0 = """
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: compute-domain-0
spec:
  numNodes: 0 # <-- this field is deprecated and will at all times be set to 0
  channel:
    resourceClaimTemplate:
      name: compute-domain-0-rct
"""
"""The ComputeDomain of NVIDIA's introduction."""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: example-mnnvl-workload
spec:
  # Ask for this deployment to be comprised of 18 pods.
  replicas: 18
  selector:
    matchLabels:
      job: ex1
  template:
    metadata:
      labels:
        job: ex1
    spec:
      # Associate all pods on this deployment with the precise ComputeDomain
      # that was previously created. To that end, consult with the so-called
      # resource claim template related to that domain. The name of that
      # template on this case is defined as `compute-domain-0-rct` within the
      # ComputeDomain API object. Here we also define a brand new name `cd-0` that
      # is consumed by the container spec below.
      resourceClaims:
      - name: cd-0
        resourceClaimTemplateName: compute-domain-0-rct
      # Define a `podAffinity` rule to be certain that all pods will land on nodes
      # in the identical NVLink partition. Specifically, require all pods to land on
      # nodes which have the _same_ value set for the `nvidia.com/gpu.clique`
      # node label. This label is about by the NVIDIA GPU Operator (based on
      # static NVLink configuration state).
      affinity:
        podAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector:
              matchExpressions:
              - key: job
                operator: In
                values:
                - ex1
            topologyKey: nvidia.com/gpu.clique
      containers:
      - name: ctr
        image: ubuntu:22.04
        command: ["mnnvl-workload"]
        resources:
          claims:
          - name: cd-0 # See `resourceClaims` above.
          limits:
            nvidia.com/gpu: 4 # Request 4 GPUs.
"""
"""The Deployment of NVIDIA's introduction (``mnnvl-workload`` is the ubuntu stand-in's channel check)."""


def computedomain_deployment(namespace: str, *, replicas: int = RACK_WORKERS) -> list[dict[str, Any]]:
    """The ComputeDomain and Deployment of NVIDIA's introduction.

    ``namespace`` is where ``kubectl apply -n`` would put them; ``replicas`` is below 18 only for racks
    of fewer trays.
    """
    objects: list[dict[str, Any]] = [yaml.safe_load(COMPUTE_DOMAIN_0), yaml.safe_load(DEPLOYMENT)]
    for item in objects:
        item["metadata"]["namespace"] = namespace
    objects[1]["spec"]["replicas"] = replicas
    return objects
