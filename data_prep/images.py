"""Images -> fixed-size uint8 shards for vision training. CLI: ``python -m data_prep images``.

Inputs: an image folder (one sub-folder per class, class ids in sorted folder-name order) or
parquet files with an image column (encoded bytes, or a ``{"bytes", "path"}`` struct as Hugging
Face ``datasets`` writes it) and a label column (integers, or strings mapped to ids in sorted
order). Every image is converted to RGB, its shorter side resized to ``image_size`` (bicubic)
and centre-cropped to ``image_size`` × ``image_size``.

Layout of ``PREFIX``: ``mlsys.data.image_shards`` (``PREFIX-00000.images.npy``,
``PREFIX-00000.labels.npy``, … and ``PREFIX.manifest.json``). Shards are written through
``mlsys.atomic`` (temp name, fsync, rename); the manifest is written last, so a prefix is
complete exactly when ``mlsys.data.image_shards.check_images_complete`` accepts it.
Undecodable images and bad labels are problems (file and row/path named): skipped and
reported, or fatal under ``strict``.
"""

from __future__ import annotations

import glob
import io
import os
from collections.abc import Iterator

import numpy as np

from data_prep.inputs import Problem, ProblemLog
from mlsys.atomic import atomic_path, remove_stale_temps
from mlsys.data.image_shards import FORMAT, check_images_complete, shard_stem
from mlsys.data.manifest import IncompleteDataset, manifest_path, write_manifest

Items = Iterator[tuple[np.ndarray, int] | Problem]
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")
SHARD_SIZE = 8192


def to_square_rgb(image, size: int) -> np.ndarray:
    """A PIL image as uint8 ``size×size×3``: shorter side resized to ``size``, centre crop."""
    from PIL import Image

    image = image.convert("RGB")
    w, h = image.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    image = image.resize((nw, nh), Image.Resampling.BICUBIC)
    left, top = (nw - size) // 2, (nh - size) // 2
    return np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.uint8)


def _decode(data: bytes, size: int, file: str, row: int) -> np.ndarray | Problem:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return to_square_rgb(image, size)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        return Problem("bad_image", file, row, f"cannot decode: {e}")


def read_folder(root: str, size: int) -> tuple[list[str], Items]:
    """(class names, images) of an image folder; row 0: a problem about a whole file."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not classes:
        raise ValueError(f"{root}: no class sub-folders (expected ROOT/<class>/<image>)")

    def items():
        for label, name in enumerate(classes):
            for path in sorted(glob.glob(os.path.join(root, name, "**", "*"), recursive=True)):
                if path.lower().endswith(IMAGE_EXTENSIONS):
                    with open(path, "rb") as f:
                        image = _decode(f.read(), size, path, 0)
                    yield image if isinstance(image, Problem) else (image, label)

    return classes, items()


def _parquet_classes(paths: list[str], label_column: str) -> list[str] | None:
    """Sorted distinct string labels, or None when the label column is integer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names: set[str] = set()
    for path in paths:
        schema = pq.ParquetFile(path).schema_arrow
        if label_column not in schema.names:
            raise ValueError(f"{path}: no label column {label_column!r} (has {schema.names})")
        kind = schema.field(label_column).type
        if pa.types.is_integer(kind):
            return None
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise ValueError(f"{path}: label column {label_column!r} is {kind}, "
                             "expected integers or strings")
        table = pq.read_table(path, columns=[label_column])
        names.update(v for v in table.column(0).to_pylist() if v is not None)
    return sorted(names)


def read_parquet(paths: list[str], size: int, image_column: str = "image",
                 label_column: str = "label", num_classes: int | None = None,
                 ) -> tuple[list[str], Items]:
    """(class names, images) of parquet files, read in record batches."""
    import pyarrow.parquet as pq

    string_classes = _parquet_classes(paths, label_column)
    lookup = {n: i for i, n in enumerate(string_classes or [])}

    def label_of(value, path: str, row: int) -> int | Problem:
        if value is None:
            return Problem("bad_label", path, row, f"null {label_column!r}")
        if string_classes is not None:
            return lookup[value]
        if value < 0 or (num_classes is not None and value >= num_classes):
            return Problem("bad_label", path, row, f"label {value} outside [0, {num_classes})")
        return int(value)

    def items():
        for path in paths:
            pf = pq.ParquetFile(path)
            if image_column not in pf.schema_arrow.names:
                raise ValueError(f"{path}: no image column {image_column!r} "
                                 f"(has {pf.schema_arrow.names})")
            row = 0
            for batch in pf.iter_batches(batch_size=256, columns=[image_column, label_column]):
                images, labels = batch.column(0).to_pylist(), batch.column(1).to_pylist()
                for value, raw_label in zip(images, labels, strict=True):
                    row += 1
                    if isinstance(value, dict):
                        value = value.get("bytes")
                    if not isinstance(value, bytes):
                        yield Problem("bad_image", path, row,
                                      f"{image_column!r} is {type(value).__name__}, not bytes")
                        continue
                    label = label_of(raw_label, path, row)
                    if isinstance(label, Problem):
                        yield label
                        continue
                    image = _decode(value, size, path, row)
                    yield image if isinstance(image, Problem) else (image, label)

    return string_classes or [], items()


def write_image_shards(items: Items, out_prefix: str, classes: list[str], size: int,
                       log: ProblemLog, *, hflip: bool = True, shard_size: int = SHARD_SIZE,
                       source: str = "", progress: bool = False) -> dict:
    """Write ``items`` ((uint8 S×S×3, label) or Problem) as shards + manifest; the manifest."""
    os.makedirs(os.path.dirname(out_prefix) or ".", exist_ok=True)
    remove_stale_temps(os.path.dirname(out_prefix) or ".")
    old = manifest_path(out_prefix)
    if os.path.exists(old):
        os.unlink(old)  # the prefix is incomplete until the new manifest is written
    shards: list[dict] = []
    buf = np.empty((shard_size, size, size, 3), dtype=np.uint8)
    labels = np.empty(shard_size, dtype=np.int64)
    sums, squares, fill, max_label = np.zeros(3), np.zeros(3), 0, -1

    def flush() -> None:
        nonlocal fill
        if fill:
            stem = shard_stem(out_prefix, len(shards))
            for ext, arr in ((".images.npy", buf[:fill]), (".labels.npy", labels[:fill])):
                with atomic_path(stem + ext) as tmp, open(tmp, "wb") as f:
                    np.save(f, arr)
            shards.append({"images": os.path.basename(stem) + ".images.npy",
                           "labels": os.path.basename(stem) + ".labels.npy", "count": fill})
            fill = 0

    from rich.progress import Progress

    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("images", total=None)
        for item in items:
            if isinstance(item, Problem):
                log.add(item)
                continue
            image, label = item
            buf[fill], labels[fill] = image, label
            pixels = image.reshape(-1, 3) / 255.0
            sums += pixels.sum(0)
            squares += (pixels ** 2).sum(0)
            max_label = max(max_label, label)
            fill += 1
            bar.advance(task)
            if fill == shard_size:
                flush()
        flush()
    total = sum(s["count"] for s in shards)
    if total == 0:
        raise ValueError(f"{source or out_prefix}: no usable images")
    n_pixels = total * size * size
    mean = sums / n_pixels
    std = np.sqrt(np.maximum(squares / n_pixels - mean ** 2, 1e-12))
    manifest = {"format": FORMAT, "num_images": total, "image_size": size, "channels": 3,
                "num_classes": max(len(classes), max_label + 1), "classes": classes,
                "mean": mean.round(6).tolist(), "std": std.round(6).tolist(), "hflip": hflip,
                "shards": shards, "source": source, "problems": log.to_dict()}
    write_manifest(manifest_path(out_prefix), manifest)
    return manifest


def build_images(inputs: list[str], out_prefix: str, image_size: int, *, image_column: str =
                 "image", label_column: str = "label", hflip: bool = True, strict: bool = False,
                 shard_size: int = SHARD_SIZE, progress: bool = True) -> dict:
    """``python -m data_prep images``: one image folder, or parquet files/globs -> shards."""
    from data_prep.inputs import expand_inputs

    log = ProblemLog(strict=strict)
    if len(inputs) == 1 and os.path.isdir(inputs[0]):
        classes, items = read_folder(inputs[0], image_size)
    else:
        paths = expand_inputs(inputs)
        bad = [p for p in paths if not p.lower().endswith(".parquet")]
        if bad:
            raise ValueError(f"{bad[0]}: expected one image folder or .parquet files")
        classes, items = read_parquet(paths, image_size, image_column, label_column)
    manifest = write_image_shards(items, out_prefix, classes, image_size, log, hflip=hflip,
                                  shard_size=shard_size, source=",".join(inputs),
                                  progress=progress)
    log.report()
    return manifest


def digits_images(size: int) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8×8 handwritten digits (1797, no download), upscaled to
    ``size``×``size`` (bicubic) and repeated to 3 channels: (uint8 N×S×S×3, int64 labels)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    small = np.clip(digits.images * (255.0 / 16.0), 0, 255).astype(np.uint8)
    big = np.stack([np.asarray(Image.fromarray(x).resize((size, size), Image.Resampling.BICUBIC))
                    for x in small])
    return np.repeat(big[..., None], 3, axis=-1), digits.target.astype(np.int64)


def prepare_default_images(out_dir: str, image_size: int = 32) -> dict:
    """Build (or reuse) the default image dataset (digits) under ``out_dir/images/``.

    Returns ``{"data_prefix", "num_classes": 10, "image_size"}``. Reused when a complete
    dataset of the same size exists; digits are not flip-invariant, so ``hflip`` is off.
    """
    prefix = os.path.join(out_dir, "images", f"digits{image_size}")
    try:
        manifest = check_images_complete(prefix)
        if manifest["image_size"] != image_size:
            raise IncompleteDataset("stale")
    except IncompleteDataset:
        images, labels = digits_images(image_size)
        manifest = write_image_shards(zip(images, labels.tolist(), strict=True), prefix,
                                      [str(i) for i in range(10)], image_size, ProblemLog(),
                                      hflip=False, source="sklearn.datasets.load_digits")
    return {"data_prefix": prefix, "num_classes": manifest["num_classes"],
            "image_size": manifest["image_size"]}
