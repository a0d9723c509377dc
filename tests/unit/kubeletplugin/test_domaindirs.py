"""Domain directories: made, filled and removed past the links a daemon plants (docs/data-path.md §7.5)."""

import os
import stat
from pathlib import Path

import pytest

from imexdra.common.errors import RetryableError
from imexdra.kubeletplugin.domaindirs import (
    TEMPLATE_NAME,
    UnsafeDirectoryError,
    prepare_domain_dir,
    remove_orphaned_domain_dirs,
)
from tests.unit.kubeletplugin.support import DOMAIN_UID, Node, daemon_claim

TEMPLATE = b"SERVER_PORT=50000\n"
PLANTED = pytest.mark.parametrize(
    "planted", [TEMPLATE_NAME, f".{TEMPLATE_NAME}.tmp"], ids=["at-target", "at-temp-name"]
)
HOST_FILE_CONTENT = "root:secret:0:0\n"


@pytest.fixture
def domains(tmp_path: Path) -> Path:
    """The plugin's ``domains`` directory (not created yet)."""
    (tmp_path / "plugin").mkdir()
    return tmp_path / "plugin" / "domains"


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    """A file of the host a daemon would like the privileged plugin to overwrite, mode 0600."""
    path = tmp_path / "shadow"
    path.write_text(HOST_FILE_CONTENT)
    path.chmod(0o600)
    return path


def names(directory: Path) -> list[str]:
    return sorted(entry.name for entry in directory.iterdir())


def assert_untouched(host_file: Path) -> None:
    assert host_file.read_text() == HOST_FILE_CONTENT
    assert stat.S_IMODE(host_file.stat().st_mode) == 0o600


def test_directory_created_with_the_template(domains: Path) -> None:
    """A fresh domain directory gets the template, mode 0644, and no temporary file is left."""
    prepare_domain_dir(domains, DOMAIN_UID, TEMPLATE)
    target = domains / DOMAIN_UID / TEMPLATE_NAME
    assert target.read_bytes() == TEMPLATE
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert names(domains / DOMAIN_UID) == [TEMPLATE_NAME]


def test_template_replaced_and_none_leaves_files_alone(domains: Path) -> None:
    """Each prepare rewrites the template; without a template the directory's files stay as they are."""
    prepare_domain_dir(domains, DOMAIN_UID, b"old\n")
    prepare_domain_dir(domains, DOMAIN_UID, TEMPLATE)
    assert (domains / DOMAIN_UID / TEMPLATE_NAME).read_bytes() == TEMPLATE
    prepare_domain_dir(domains, DOMAIN_UID, None)
    assert (domains / DOMAIN_UID / TEMPLATE_NAME).read_bytes() == TEMPLATE


@PLANTED
def test_planted_link_is_replaced_not_written_through(domains: Path, host_file: Path, planted: str) -> None:
    """A link to a host file in place of the template or its temporary name: the host file is untouched."""
    prepare_domain_dir(domains, DOMAIN_UID, None)
    (domains / DOMAIN_UID / planted).symlink_to(host_file)
    prepare_domain_dir(domains, DOMAIN_UID, TEMPLATE)
    assert_untouched(host_file)
    target = domains / DOMAIN_UID / TEMPLATE_NAME
    assert stat.S_ISREG(target.lstat().st_mode)
    assert target.read_bytes() == TEMPLATE
    assert names(domains / DOMAIN_UID) == [TEMPLATE_NAME]


@PLANTED
def test_planted_directory_fails_clearly(domains: Path, planted: str) -> None:
    """A directory in place of the template or its temporary name is an error naming it; nothing is left."""
    prepare_domain_dir(domains, DOMAIN_UID, None)
    (domains / DOMAIN_UID / planted).mkdir()
    with pytest.raises(IsADirectoryError):
        prepare_domain_dir(domains, DOMAIN_UID, TEMPLATE)
    assert names(domains / DOMAIN_UID) == [planted]


@pytest.mark.parametrize("linked", ["domain", "domains"])
def test_linked_directory_is_refused(domains: Path, tmp_path: Path, linked: str) -> None:
    """The domain directory, or ``domains`` itself, being a link: refused, nothing written where it points."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if linked == "domains":
        domains.symlink_to(elsewhere)
    else:
        domains.mkdir()
        (domains / DOMAIN_UID).symlink_to(elsewhere)
    with pytest.raises(UnsafeDirectoryError, match="is not a directory"):
        prepare_domain_dir(domains, DOMAIN_UID, TEMPLATE)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a directory's owner needs root")
def test_directory_of_another_owner_is_refused(domains: Path) -> None:
    """A domain directory the plugin's user does not own is not written into."""
    prepare_domain_dir(domains, DOMAIN_UID, None)
    os.chown(domains / DOMAIN_UID, 65534, 65534)
    with pytest.raises(UnsafeDirectoryError, match="is owned by uid 65534"):
        prepare_domain_dir(domains, DOMAIN_UID, TEMPLATE)
    assert list((domains / DOMAIN_UID).iterdir()) == []


async def test_daemon_prepare_does_not_write_through_a_planted_link(tmp_path: Path, host_file: Path) -> None:
    """A daemon claim's prepare copies the image's template past a link the daemon left in /imexd."""
    node = Node(tmp_path)
    await node.initialize()
    template = tmp_path / "image-template.cfg"
    template.write_bytes(TEMPLATE)
    node.state._applier.daemon_config_template = template
    domain_dir = node.paths.domain_dir(DOMAIN_UID)
    domain_dir.mkdir(parents=True)
    (domain_dir / TEMPLATE_NAME).symlink_to(host_file)
    await node.state.prepare(daemon_claim())
    assert_untouched(host_file)
    assert (domain_dir / TEMPLATE_NAME).read_bytes() == TEMPLATE


async def test_daemon_prepare_into_a_linked_domain_dir_is_retried(tmp_path: Path) -> None:
    """A domain directory that is a link fails the daemon claim retryably, naming the directory."""
    node = Node(tmp_path)
    await node.initialize()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    node.paths.domains_dir.mkdir()
    node.paths.domain_dir(DOMAIN_UID).symlink_to(elsewhere)
    with pytest.raises(RetryableError, match=r"error preparing daemon directory .* is not a directory"):
        await node.state.prepare(daemon_claim())


def test_orphaned_domain_dirs_removed(tmp_path: Path) -> None:
    """Directories of domains that no longer exist go; known ones and plain files stay."""
    (tmp_path / DOMAIN_UID).mkdir()
    (tmp_path / "gone-uid").mkdir()
    (tmp_path / "gone-uid" / "imexd.cfg").write_text("x")
    (tmp_path / "stray-file").write_text("x")
    assert remove_orphaned_domain_dirs(tmp_path, {DOMAIN_UID}) == ["gone-uid"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [DOMAIN_UID, "stray-file"]
    assert remove_orphaned_domain_dirs(tmp_path / "missing", set()) == []


def test_orphan_removal_follows_no_link(tmp_path: Path, host_file: Path) -> None:
    """Links inside an orphaned directory are removed, not followed; a link in ``domains`` is left alone."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "keep").write_text("x")
    domains = tmp_path / "domains"
    (domains / "gone-uid" / "nested").mkdir(parents=True)
    (domains / "gone-uid" / "to-dir").symlink_to(outside)
    (domains / "gone-uid" / "nested" / "to-file").symlink_to(host_file)
    (domains / "linked-uid").symlink_to(outside)
    assert remove_orphaned_domain_dirs(domains, set()) == ["gone-uid"]
    assert_untouched(host_file)
    assert (outside / "sub" / "keep").read_text() == "x"
    assert sorted(p.name for p in domains.iterdir()) == ["linked-uid"]
