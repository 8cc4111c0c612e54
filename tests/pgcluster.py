"""A throwaway PostgreSQL cluster from Debian's binaries, on a unix socket in a temporary folder.

PostgreSQL refuses to run as root, so under root (as in CI) the server runs as the `postgres` user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def binaries() -> Path | None:
    for folder in BIN_DIRS:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


def why_unavailable() -> str | None:
    """A reason to skip, or None when a cluster can be started here."""
    if binaries() is None:
        return "PostgreSQL's initdb/pg_ctl are not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    return None


def _as_server_user(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextlib.contextmanager
def cluster():
    """Yield (socket_dir, admin_user); the cluster is stopped and removed afterwards."""
    bindir = binaries()
    root = Path(tempfile.mkdtemp(prefix="assistlab-pg-"))
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    root.chmod(0o700)
    data = root / "data"
    try:
        subprocess.run(
            _as_server_user([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", user, "-E", "UTF8",
                             "--no-sync"]),
            check=True, capture_output=True, timeout=120,
        )
        subprocess.run(
            _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60",
                             "-o", f"-k {root} -c listen_addresses='' -c fsync=off -c max_connections=50", "start"]),
            check=True, capture_output=True, timeout=120,
        )
        yield str(root), user
    finally:
        subprocess.run(
            _as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True, timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(socket_dir: str, user: str, name: str) -> str:
    """Create an empty database and return its SQLAlchemy URL."""
    import psycopg

    with psycopg.connect(host=socket_dir, user=user, dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://{user}@/{name}?host={socket_dir}"
