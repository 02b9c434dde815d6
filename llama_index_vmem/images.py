"""Image bytes in, validated file on disk out: the only code that reads user-supplied images.

Every image is checked before anything is written (zero bytes, not an image, a format not read
here, truncated, decompression bomb, oversized file, unsupported or malformed URL, a URL too slow
to fetch) and saved once under the memory's image directory by content hash, so nodes carry a
path and never base64.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.client
import io
import logging
import os
import re
import stat
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import warnings
import weakref
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Set, Union

from PIL import Image, UnidentifiedImageError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from .errors import VMemInputError

logger = logging.getLogger(__name__)

#: Largest image file accepted (bytes).
MAX_IMAGE_BYTES = 50 * 1024 * 1024
#: Largest decoded image accepted (pixels); bigger ones are treated as decompression bombs.
MAX_IMAGE_PIXELS = 64_000_000
URL_SCHEMES = ("http", "https", "file", "data")
#: Image formats read, of those this Pillow has: photo and screenshot formats. Others are refused
#: unread, since PIL hands some to outside programs (EPS to Ghostscript, which a file can stall).
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF", "AVIF")
#: Seconds a URL fetch may take in all, however slowly its server trickles bytes.
_URL_TIMEOUT_S = 20


@dataclass(frozen=True)
class LoadedImage:
    """Validated image bytes with what we learned decoding them."""

    data: bytes
    format: str
    width: int
    height: int

    @property
    def extension(self) -> str:
        return {"JPEG": "jpg"}.get(self.format, self.format.lower())

    @cached_property
    def file_name(self) -> str:
        """Named by content hash: the same pixels shared twice are one file, and a file's name
        vouches for its bytes."""
        return f"{hashlib.sha256(self.data).hexdigest()}.{self.extension}"


#: Every ``LoadedImage`` that ``validate`` made and that is still in use, by identity: an equal one
#: built by hand is not it, and two made from the same bytes both count.
_VALIDATED: "weakref.WeakValueDictionary[int, LoadedImage]" = weakref.WeakValueDictionary()


def validated(image: Any) -> bool:
    """Whether ``image`` is a ``LoadedImage`` that ``validate`` made: one built by hand (as an
    ``ImageInput.checked``) vouches for nothing, and its bytes are read and checked again."""
    return isinstance(image, LoadedImage) and _VALIDATED.get(id(image)) is image


#: The image folder of every memory opened in this process, wherever its image root is.
_MEMORY_FOLDERS: Set[Path] = set()
_MEMORY_FOLDERS_GUARD = threading.Lock()
#: Hex digits of a memory's folder name (``memory_folder``).
_MEMORY_FOLDER_DIGITS = 16
#: A memory folder's name, in any case: a file system that ignores case opens it spelt in capitals.
_MEMORY_FOLDER_NAME = re.compile(f"[0-9a-f]{{{_MEMORY_FOLDER_DIGITS}}}", re.IGNORECASE)


def memory_folder(image_dir: Path, memory_id: str) -> Path:
    """A memory's image folder: named by a hash of its id, so any id is a safe folder name.
    Absolute, since payloads keep it: a store reopened from another directory finds its pictures."""
    return Path(image_dir).absolute() / hashlib.sha256(memory_id.encode()).hexdigest()[:_MEMORY_FOLDER_DIGITS]


@dataclass(frozen=True)
class Fence:
    """A memory may read files anywhere except another memory's image folder, so a crafted path
    cannot copy or deliver another tenant's pictures. Memories of one store keep their folders
    side by side under ``root``, named as ``memory_folder`` names them, whether or not this process
    opened them; a memory opened in this process is fenced off wherever its folder is. Other files
    under ``root`` (a user's own photos kept in the ``images`` folder) are anyone's to read."""

    root: Path
    own: Path

    @classmethod
    def around(cls, own: Path) -> "Fence":
        """A memory's folder sits in the store's image folder, beside the other memories'."""
        with _MEMORY_FOLDERS_GUARD:
            _MEMORY_FOLDERS.add(Path(own).resolve())
        return cls(Path(own).parent, Path(own))

    def check(self, item: str, path: Union[str, os.PathLike]) -> None:
        """Refuse reading ``path`` from another memory's folder."""
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(self.own.resolve()) and self._fenced(resolved):
            raise VMemInputError(item, f"{path} is in another memory's image folder")

    def check_write(self, item: str, path: Union[str, os.PathLike]) -> None:
        """Refuse writing ``path`` into any memory's folder, this one's too: a file written there
        could take the place of a picture, and forget clears the folder."""
        if self._fenced(Path(path).resolve()):
            raise VMemInputError(item, f"{path} is in a memory's image folder: write it elsewhere")

    def _fenced(self, resolved: Path) -> bool:
        with _MEMORY_FOLDERS_GUARD:
            opened = list(_MEMORY_FOLDERS)
        return any(resolved.is_relative_to(folder) for folder in opened) or self._beside_own(resolved)

    def _beside_own(self, resolved: Path) -> bool:
        """Inside a folder of ``root`` named as a memory's folder is named."""
        root = self.root.resolve()
        if not resolved.is_relative_to(root):
            return False
        parts = resolved.relative_to(root).parts
        return len(parts) > 1 and _MEMORY_FOLDER_NAME.fullmatch(parts[0]) is not None


def read_source(
    item: str,
    *,
    path: Optional[Union[str, os.PathLike]] = None,
    data: Optional[bytes] = None,
    url: Optional[str] = None,
    fence: Optional[Fence] = None,
) -> bytes:
    """Raw bytes from exactly one of a path, bytes or a URL (http, https, file, data)."""
    given = [x for x in (path, data, url) if x is not None]
    if len(given) != 1:
        raise VMemInputError(item, "give exactly one of path, bytes or url")
    if data is not None:
        if not isinstance(data, (bytes, bytearray)):
            raise VMemInputError(item, f"image bytes must be bytes, got {type(data).__name__}")
        return bytes(data)
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            raise VMemInputError(item, f"image path must be a str or path, got {type(path).__name__}")
        return _read_file(item, Path(path), fence)
    if not isinstance(url, str):
        raise VMemInputError(item, f"image url must be a str, got {type(url).__name__}")
    return _read_url(item, url, fence)


def _read_file(item: str, path: Path, fence: Optional[Fence]) -> bytes:
    if "\x00" in str(path):
        raise VMemInputError(item, f"image path {str(path)!r} contains NUL")
    try:
        os.fsencode(path)  # a lone surrogate no file name decodes to: every OS call on it raises UnicodeEncodeError
    except UnicodeEncodeError:
        raise VMemInputError(item, f"image path {str(path)!r} names no file (it holds a lone surrogate)") from None
    try:
        # Opened once, then checked and read through that one descriptor: a link swapped in after
        # the check cannot change what is read. O_NONBLOCK: a pipe opens at once, to be refused.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        try:
            _check_opened(item, fd, path, fence)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_IMAGE_BYTES + 1)  # a file that grew since fstat is still capped
        if len(raw) > MAX_IMAGE_BYTES:
            raise VMemInputError(item, f"{path} is over the {MAX_IMAGE_BYTES}-byte limit")
        return raw
    except VMemInputError:
        raise
    except FileNotFoundError:
        raise VMemInputError(item, f"image file not found: {path}") from None
    except OSError as exc:
        raise VMemInputError(item, f"cannot read image file {path}: {exc}") from None


def _check_opened(item: str, fd: int, path: Path, fence: Optional[Fence]) -> None:
    """Refuse the file open at ``fd`` (opened from ``path``) if it is fenced off, no regular file, or too big."""
    if fence is not None:
        fence.check(item, _opened_path(item, fd, path))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # a device or pipe reports no size and may never end
        raise VMemInputError(item, f"{path} is not a regular file")
    if info.st_size > MAX_IMAGE_BYTES:
        raise VMemInputError(item, f"{path} is {info.st_size} bytes, over the {MAX_IMAGE_BYTES} limit")


def _opened_path(item: str, fd: int, path: Path) -> Path:
    """Where the file open at ``fd`` really is, asked of the system by descriptor (Linux, macOS);
    elsewhere ``path`` resolved, refused unless it is still the very file that is open."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
    if hasattr(fcntl, "F_GETPATH"):  # macOS
        return Path(os.fsdecode(fcntl.fcntl(fd, fcntl.F_GETPATH, bytes(1024)).rstrip(b"\0")))
    resolved = path.resolve()
    if not os.path.samestat(os.fstat(fd), resolved.stat()):
        raise VMemInputError(item, f"{path} changed while it was opened")
    return resolved


def _read_url(item: str, url: str, fence: Optional[Fence]) -> bytes:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:
        raise VMemInputError(item, f"malformed URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in URL_SCHEMES:
        raise VMemInputError(item, f"unsupported URL scheme {scheme!r} (allowed: {', '.join(URL_SCHEMES)})")
    if scheme == "file":
        return _read_file(item, Path(urllib.request.url2pathname(parts.path)), fence)
    if scheme == "data":
        header, _, payload = url.partition(",")
        try:
            raw = base64.b64decode(payload) if header.endswith(";base64") else urllib.parse.unquote_to_bytes(payload)
        except ValueError as exc:
            raise VMemInputError(item, f"malformed data URL: {exc}") from None
        return raw
    deadline = time.monotonic() + _URL_TIMEOUT_S
    raw = bytearray()
    try:
        with urllib.request.urlopen(url, timeout=_URL_TIMEOUT_S) as response:
            while chunk := response.read1(1 << 16):
                raw += chunk
                if len(raw) > MAX_IMAGE_BYTES:
                    raise VMemInputError(item, f"{url} is over the {MAX_IMAGE_BYTES}-byte limit")
                if time.monotonic() > deadline:
                    raise VMemInputError(item, f"{url} took over {_URL_TIMEOUT_S} s to fetch")
    except VMemInputError:
        raise
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise VMemInputError(item, f"cannot fetch {url}: {exc!r}") from None
    return bytes(raw)


def _open(source: Union[str, os.PathLike, io.BytesIO]) -> Image.Image:
    return Image.open(source, formats=_readable_formats())


@functools.cache
def _readable_formats() -> List[str]:
    Image.init()
    return [f for f in FORMATS if f in Image.OPEN]


def is_url(image: Union[str, os.PathLike]) -> bool:
    """A URL (``scheme:...``) rather than a local path; a ``Path`` and an existing file always count as paths."""
    if not isinstance(image, str) or not re.match(r"^[a-z][a-z0-9+.-]*:", image, re.IGNORECASE):
        return False
    try:
        return not Path(image).exists()
    except OSError:  # too long to name a file: a photo's data: URL
        return True


def validate(item: str, data: bytes) -> LoadedImage:
    """Decode fully, so truncated files and bombs fail here rather than at query time."""
    if not data:
        raise VMemInputError(item, "image is empty (0 bytes)")
    if len(data) > MAX_IMAGE_BYTES:
        raise VMemInputError(item, f"image is {len(data)} bytes, over the {MAX_IMAGE_BYTES} limit")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with _open(io.BytesIO(data)) as img:
                width, height = img.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise VMemInputError(
                        item, f"image is {width}x{height} pixels, over the {MAX_IMAGE_PIXELS}-pixel limit"
                    )
                fmt = img.format or "PNG"
                img.load()
    except VMemInputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise VMemInputError(item, f"decompression bomb rejected: {exc}") from None
    except UnidentifiedImageError:
        raise VMemInputError(item, f"not an image in a format read here ({', '.join(_readable_formats())})") from None
    except Exception as exc:  # a decoder meeting bytes it did not expect may raise anything
        raise VMemInputError(item, f"corrupt or truncated image: {exc!r}") from None
    loaded = LoadedImage(data=data, format=fmt, width=width, height=height)
    _VALIDATED[id(loaded)] = loaded
    return loaded


def save(image: LoadedImage, directory: Path) -> Path:
    """Write once by content hash; the same pixels shared twice are one file. A file under the name
    that no longer holds them (cut short, overwritten, bit rot) is written again: adding the picture
    again mends it."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / image.file_name
    if not (intact(target) and touch(target)):
        write_atomically(target, lambda tmp: tmp.write_bytes(image.data))
    return target


def touch(path: Path) -> bool:
    """Mark a kept file as just used, so ``sweep_stale`` keeps it: False where it is gone (swept
    meanwhile), for the caller to write it again. A file this process may read but not touch (another
    user's) is used as it is."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return path.exists()


def save_each(images: Iterable[LoadedImage], directory: Path, created: List[Path]) -> None:
    """``save`` each image, adding to ``created`` the files that were not there before, as they are
    written: the caller's rollback of a failed write removes those, and no file another round holds."""
    for image in images:
        target = directory / image.file_name
        existed = target.exists()
        save(image, directory)
        if not existed:
            created.append(target)


def intact(path: Path) -> bool:
    """Whether a saved picture's file holds the bytes its name (``LoadedImage.file_name``) vouches for:
    read only where the file is there, so a new picture costs no read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == path.stem
    except FileNotFoundError:
        return False


def _file_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (``mkstemp``'s is 0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


#: Read once, at import: setting the umask to read it is not safe while other threads create files.
_FILE_MODE = _file_mode()


def write_atomically(target: Path, write: Callable[[Path], None], durable: bool = False) -> None:
    """``write`` a temporary file of this call's own, then rename it to ``target``: readers never
    see half a file, and two writers of one target (two chats attaching the same picture) never
    share a temporary file. The temporary file is created exclusively (``mkstemp``), so a link
    planted in the folder under a name it might take is never followed. ``durable`` syncs the file
    and its folder to disk, for a file whose loss a power cut must not cause (a store's manifest),
    at a few milliseconds a write."""
    fd, name = tempfile.mkstemp(prefix=f"{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        if os.chmod in os.supports_fd:  # not on Windows, whose files have no such mode
            os.chmod(fd, _FILE_MODE)
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        if durable:
            _sync(tmp)
        os.replace(tmp, target)
        if durable:
            try:
                _sync(target.parent)  # the rename itself
            except OSError:  # a folder cannot be synced on Windows and some network file systems
                pass
    finally:
        tmp.unlink(missing_ok=True)


#: Age past which a temporary file is a killed write's: a live write's is seconds old.
STALE_TEMPORARY_S = 3600.0
#: Age past which a cached copy (a labelled picture, a kept attachment) is no longer in use: each
#: use ``touch``es it, and one lasts an answer call.
STALE_CACHE_S = 24 * 3600.0


def sweep_stale(files: Iterable[Path], age_s: float) -> None:
    """Remove those of ``files`` that have not changed for ``age_s`` seconds: only stale ones go, so
    a write or a use in flight in any process keeps its own. Best effort: a file this process may
    not remove (another user's) stays."""
    cutoff = time.time() - age_s
    for path in files:
        try:
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
        except FileNotFoundError:  # its writer renamed or removed it meanwhile
            pass
        except OSError as e:
            logger.debug("left %s: %s", path, e)


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def to_rgb(img: Image.Image) -> Image.Image:
    """RGB, going through RGBA for palette images with transparency (as PIL recommends)."""
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    return img.convert("RGB")


def region_crops(data: bytes, overlap: float = 0.2) -> List[bytes]:
    """The whole image, then 2x2 tiles that each cover (1 + overlap) / 2 of its width and height.

    Tiles let a query that shows part of a stored picture (a crop, a detail) match the region it
    shows (DeliverMem's R1); they are PNG bytes ready for the image encoder.
    """
    with _open(io.BytesIO(data)) as img:
        img = to_rgb(img)
    w, h = img.size
    tw, th = round(w * (1 + overlap) / 2), round(h * (1 + overlap) / 2)
    boxes = [(0, 0, tw, th), (w - tw, 0, w, th), (0, h - th, tw, h), (w - tw, h - th, w, h)]
    out = [data]
    for box in boxes:
        buf = io.BytesIO()
        img.crop(box).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def open_rgb(path: Union[str, os.PathLike, io.BytesIO]) -> Image.Image:
    with _open(path) as img:
        return to_rgb(img)
