"""The objects the controller creates for a ComputeDomain, rendered exactly as upstream's templates.

Pure functions of a ComputeDomain and the controller configuration (docs/data-path.md §2, §9.1):

- the workload ResourceClaimTemplate, in the domain's namespace, named by
  ``spec.channel.resourceClaimTemplate.name``, with a ComputeDomainChannelConfig carrying the domain UID
  and the spec's allocation mode (kept under HostManagedIMEX too, docs/compatibility.md §3.4); under
  channel isolation it asks the channel class for the domain's own number by a CEL selector
  (docs/channel-isolation.md §6), the config unchanged;
- the daemon ResourceClaimTemplate and the daemon DaemonSet, both ``computedomain-daemon-<uid>`` in the
  driver namespace (driver-managed mode only). The pod's DNS config sets ``ndots: 1``, as upstream's
  since #1465 (``DAEMON_DNS_CONFIG``). The daemon's container adds one thing to upstream's: a
  least-privilege securityContext (docs/tenancy.md, "The IMEX daemon's privileges").

None carries ownerReferences (the domain may live in another namespace); the CD label and the finalizer
tie them to the domain. Upstream renders YAML templates baked into its image; building typed objects
directly gives the same wire shape without a template engine.
"""

from __future__ import annotations

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import (
    CHANNEL_REQUEST_NAME,
    COMPUTE_DOMAIN_FINALIZER,
    COMPUTE_DOMAIN_LABEL_KEY,
    DAEMON_REQUEST_NAME,
    DEVICE_ATTRIBUTE_ID,
    DEVICE_CLASS_CHANNEL,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
    TARGET_LABEL_KEY,
    AllocationMode,
    ClaimTemplateTarget,
    daemon_object_name,
)
from imexdra.api.flags.common import LogFormat
from imexdra.api.flags.daemon import DEFAULT_IMEX_PEERS_POLL_INTERVAL
from imexdra.api.opaque import (
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    opaque_device_configuration,
)
from imexdra.common.kube.models.apps_v1 import DaemonSet, DaemonSetSpec
from imexdra.common.kube.models.core_v1 import (
    Capabilities,
    Container,
    EnvVar,
    EnvVarSource,
    ExecAction,
    LocalObjectReference,
    ObjectFieldSelector,
    PodDNSConfig,
    PodDNSConfigOption,
    PodResourceClaim,
    PodSpec,
    PodTemplateSpec,
    Probe,
    ResourceClaim,
    ResourceRequirements,
    SeccompProfile,
    SecurityContext,
    Toleration,
)
from imexdra.common.kube.models.meta_v1 import LabelSelector, ObjectMeta
from imexdra.common.kube.models.resource_v1 import (
    CELDeviceSelector,
    DeviceClaim,
    DeviceClaimConfiguration,
    DeviceRequest,
    DeviceSelector,
    ExactDeviceRequest,
    ResourceClaimSpec,
    ResourceClaimTemplate,
    ResourceClaimTemplateSpec,
)
from imexdra.controller.config import ControllerConfig

#: ServiceAccount of the daemon pods (created by the chart in every managed namespace).
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"
#: Name of the daemon container, and of the pod's claim on the daemon device.
DAEMON_CONTAINER_NAME = "compute-domain-daemon"
DAEMON_POD_CLAIM_NAME = "compute-domain-daemon"

_VERBOSITY_ARGS = ["-v", "$(LOG_VERBOSITY)"]

#: The daemon pod's resolver options (upstream #1465): IMEX's peer names have no dot, so with the
#: kubelet's default ``ndots: 5`` a name missing from the hosts file would be asked of the cluster DNS
#: under every search domain first; with ``ndots: 1`` it is asked once, as it is.
DAEMON_DNS_CONFIG = PodDNSConfig(options=[PodDNSConfigOption(name="ndots", value="1")])


def domain_uid(cd: ComputeDomain) -> str:
    """The domain's UID (every object the controller renders is keyed by it)."""
    if cd.metadata is None or not cd.metadata.uid:
        raise ValueError("ComputeDomain has no metadata.uid")
    return cd.metadata.uid


def channel_allocation_mode(cd: ComputeDomain) -> AllocationMode:
    """The allocation mode written into the workload claim: the spec's, in both IMEX modes.

    Under HostManagedIMEX the template stays the same; the kubelet plugin rejects ``All`` at prepare
    time with a permanent error, so the user sees why instead of a silent downgrade
    (docs/compatibility.md §3.4).
    """
    if cd.spec is None:
        return AllocationMode.SINGLE
    return cd.spec.channel.allocation_mode


def workload_template_name(cd: ComputeDomain) -> str:
    """Name of the workload ResourceClaimTemplate (``spec.channel.resourceClaimTemplate.name``)."""
    if cd.spec is None:
        raise ValueError("ComputeDomain has no spec")
    return cd.spec.channel.resource_claim_template.name


def _labels(uid: str, target: ClaimTemplateTarget | None = None) -> dict[str, str]:
    labels = {COMPUTE_DOMAIN_LABEL_KEY: uid}
    if target is not None:
        labels[TARGET_LABEL_KEY] = target.value
    return labels


def _claim_template(
    *,
    name: str,
    namespace: str,
    uid: str,
    target: ClaimTemplateTarget,
    request: str,
    device_class: str,
    config: ComputeDomainChannelConfig | ComputeDomainDaemonConfig,
    selectors: list[DeviceSelector] | None = None,
) -> ResourceClaimTemplate:
    exactly = ExactDeviceRequest(deviceClassName=device_class, selectors=selectors)
    devices = DeviceClaim(
        requests=[DeviceRequest(name=request, exactly=exactly)],
        config=[DeviceClaimConfiguration(requests=[request], opaque=opaque_device_configuration(config))],
    )
    return ResourceClaimTemplate(
        metadata=ObjectMeta(
            name=name, namespace=namespace, labels=_labels(uid, target), finalizers=[COMPUTE_DOMAIN_FINALIZER]
        ),
        spec=ResourceClaimTemplateSpec(spec=ResourceClaimSpec(devices=devices)),
    )


def channel_selector(channel: int) -> DeviceSelector:
    """The CEL selector that admits only the device of IMEX channel ``channel``."""
    expression = f'device.attributes["{DRIVER_NAME}"].{DEVICE_ATTRIBUTE_ID} == {int(channel)}'
    return DeviceSelector(cel=CELDeviceSelector(expression=expression))


def workload_claim_template(cd: ComputeDomain, channel: int | None = None) -> ResourceClaimTemplate:
    """The claim template workloads reference to get the domain's IMEX channel.

    ``channel``: the domain's own number under channel isolation (the channel class, narrowed by a
    CEL selector to that one device); None: upstream's template on the default channel 0 class.
    """
    uid = domain_uid(cd)
    assert cd.metadata is not None  # checked by domain_uid
    mode = channel_allocation_mode(cd)
    return _claim_template(
        name=workload_template_name(cd),
        namespace=cd.metadata.namespace or "default",
        uid=uid,
        target=ClaimTemplateTarget.WORKLOAD,
        request=CHANNEL_REQUEST_NAME,
        device_class=DEVICE_CLASS_DEFAULT_CHANNEL if channel is None else DEVICE_CLASS_CHANNEL,
        config=ComputeDomainChannelConfig(domain_id=uid, allocation_mode=mode),
        selectors=None if channel is None else [channel_selector(channel)],
    )


def daemon_claim_template(uid: str, namespace: str) -> ResourceClaimTemplate:
    """The claim template each daemon pod uses to get its node's daemon device."""
    return _claim_template(
        name=daemon_object_name(uid),
        namespace=namespace,
        uid=uid,
        target=ClaimTemplateTarget.DAEMON,
        request=DAEMON_REQUEST_NAME,
        device_class=DEVICE_CLASS_DAEMON,
        config=ComputeDomainDaemonConfig(domain_id=uid),
    )


def _field_env(name: str, path: str) -> EnvVar:
    return EnvVar(name=name, valueFrom=EnvVarSource(fieldRef=ObjectFieldSelector(fieldPath=path)))


def daemon_env(config: ControllerConfig) -> list[EnvVar]:
    """The daemon container's environment: upstream's, in its order.

    ``LOGGING_FORMAT`` follows when the controller logs JSON (docs/logging.md), so that one install logs
    one way, and ``IMEX_PEERS_POLL_INTERVAL`` when the install sets another than the daemon's default
    (docs/imex-health.md §3); with neither, the list is exactly upstream's.
    """
    env = [
        EnvVar(name="LOG_VERBOSITY", value=str(config.daemon_log_verbosity)),
        EnvVar(name="MAX_NODES_PER_IMEX_DOMAIN", value=str(config.max_nodes_per_imex_domain)),
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_IP", "status.podIP"),
        _field_env("POD_UID", "metadata.uid"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        EnvVar(name="NVIDIA_VISIBLE_DEVICES", value="void"),
        EnvVar(name="FEATURE_GATES", value=config.feature_gates.render()),
    ]
    if config.daemon_logging_format is not LogFormat.TEXT:
        env.append(EnvVar(name="LOGGING_FORMAT", value=config.daemon_logging_format.value))
    if config.daemon_imex_peers_poll_interval != DEFAULT_IMEX_PEERS_POLL_INTERVAL:
        interval = f"{config.daemon_imex_peers_poll_interval:g}"
        env.append(EnvVar(name="IMEX_PEERS_POLL_INTERVAL", value=interval))
    return env


def _check_probe(
    *,
    period: int,
    failure_threshold: int,
    initial_delay: int | None = None,
    success_threshold: int | None = None,
) -> Probe:
    # The kubelet expands $(LOG_VERBOSITY) in exec probes from the container's literal env values.
    return Probe(
        exec=ExecAction(command=["compute-domain-daemon", *_VERBOSITY_ARGS, "check"]),
        initialDelaySeconds=initial_delay,
        periodSeconds=period,
        timeoutSeconds=10,
        failureThreshold=failure_threshold,
        successThreshold=success_threshold,
    )


def daemon_security_context() -> SecurityContext:
    """The daemon container's privileges: root, as nvidia-imex is, without any capability or escalation.

    Root because the files the daemon and nvidia-imex write are root's: the pod's ``/etc/hosts`` (the
    kubelet's), the plugin-made ``/imexd`` and nvidia-imex's stats file under ``/var/log``. As their
    owner, root writes them without ``CAP_DAC_OVERRIDE``; signalling its own child, binding ports
    50000/50005 and opening the device nodes the CDI spec grants need no capability either
    (docs/tenancy.md, "The IMEX daemon's privileges").
    """
    return SecurityContext(
        privileged=False,
        allowPrivilegeEscalation=False,
        capabilities=Capabilities(drop=["ALL"]),
        seccompProfile=SeccompProfile(type="RuntimeDefault"),
    )


def _daemon_container(config: ControllerConfig) -> Container:
    return Container(
        name=DAEMON_CONTAINER_NAME,
        image=config.image_name,
        command=["compute-domain-daemon", *_VERBOSITY_ARGS, "run"],
        env=daemon_env(config),
        resources=ResourceRequirements(claims=[ResourceClaim(name=DAEMON_POD_CLAIM_NAME)]),
        startupProbe=_check_probe(period=1, failure_threshold=1200, initial_delay=0, success_threshold=1),
        livenessProbe=_check_probe(period=60, failure_threshold=20),
        readinessProbe=_check_probe(period=10, failure_threshold=1),
        securityContext=daemon_security_context(),
    )


def daemon_set(uid: str, config: ControllerConfig) -> DaemonSet:
    """The DaemonSet running one IMEX daemon on every node the kubelet plugin labelled for the domain."""
    labels = _labels(uid)
    pod_spec = PodSpec(
        serviceAccountName=DAEMON_SERVICE_ACCOUNT,
        imagePullSecrets=[LocalObjectReference(name=s) for s in config.image_pull_secrets] or None,
        nodeSelector=dict(labels),
        tolerations=[
            Toleration(operator="Exists", effect=effect)
            for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")
        ],
        resourceClaims=[
            PodResourceClaim(name=DAEMON_POD_CLAIM_NAME, resourceClaimTemplateName=daemon_object_name(uid))
        ],
        containers=[_daemon_container(config)],
        dnsConfig=DAEMON_DNS_CONFIG,
    )
    return DaemonSet(
        metadata=ObjectMeta(
            name=daemon_object_name(uid),
            namespace=config.driver_namespace,
            labels=dict(labels),
            finalizers=[COMPUTE_DOMAIN_FINALIZER],
        ),
        spec=DaemonSetSpec(
            selector=LabelSelector(matchLabels=dict(labels)),
            template=PodTemplateSpec(metadata=ObjectMeta(labels=dict(labels)), spec=pod_spec),
        ),
    )
