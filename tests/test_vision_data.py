"""Image data: ``python -m data_prep images`` shards, the digits default, runtime datasets."""

from __future__ import annotations

import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from data_prep.__main__ import main as data_prep_main
from data_prep.images import digits_images, prepare_default_images, to_square_rgb
from mlsys.data.image_shards import check_images_complete
from mlsys.data.manifest import IncompleteDataset
from mlsys.data.vision import ImageShards, build_image_datasets, collate_images


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _random_image(rng, w: int, h: int, mode: str = "RGB") -> Image.Image:
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    arr = rng.integers(0, 256, size=(h, w, channels), dtype=np.uint8)
    return Image.fromarray(arr[..., 0] if mode == "L" else arr, mode)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return prepare_default_images(str(tmp_path_factory.mktemp("img")), image_size=16)


def test_default_digits_idempotent_and_exact(digits, tmp_path):
    assert digits["num_classes"] == 10 and digits["image_size"] == 16
    manifest = check_images_complete(digits["data_prefix"])
    assert manifest["num_images"] == 1797 and manifest["hflip"] is False
    shard = digits["data_prefix"] + "-00000.images.npy"
    before = os.stat(shard).st_mtime_ns
    again = prepare_default_images(os.path.dirname(os.path.dirname(digits["data_prefix"])), 16)
    assert again == digits and os.stat(shard).st_mtime_ns == before  # reused, not rewritten
    images, labels = digits_images(16)
    shards = ImageShards(digits["data_prefix"])
    for k in (0, 901, 1796):
        image, label = shards.get(k)
        assert np.array_equal(image, images[k]) and label == labels[k]
    assert np.bincount(labels).min() >= 170  # all ten classes present


def test_image_folder_cli(tmp_path, capsys):
    rng = np.random.default_rng(0)
    originals = {}
    for cls, specs in {"cat": [(20, 12, "RGB"), (9, 9, "L")], "dog": [(8, 30, "RGBA")]}.items():
        os.makedirs(tmp_path / "in" / cls)
        for j, (w, h, mode) in enumerate(specs):
            image = _random_image(rng, w, h, mode)
            image.save(tmp_path / "in" / cls / f"{j}.png")
            originals[(cls, j)] = to_square_rgb(image, 8)
    (tmp_path / "in" / "dog" / "broken.png").write_bytes(b"not an image")
    out = str(tmp_path / "out" / "pets")
    assert data_prep_main(["images", "--input", str(tmp_path / "in"), "--out", out,
                           "--image-size", "8", "--quiet"]) == 0
    assert "broken.png" in capsys.readouterr().err  # reported with its path, then skipped
    m = check_images_complete(out)
    assert (m["num_images"], m["num_classes"], m["classes"]) == (3, 2, ["cat", "dog"])
    shards = ImageShards(out)
    expected = [(originals[("cat", 0)], 0), (originals[("cat", 1)], 0), (originals[("dog", 0)], 1)]
    for k, (image, label) in enumerate(expected):
        got, got_label = shards.get(k)
        assert got.shape == (8, 8, 3) and np.array_equal(got, image) and got_label == label
    assert data_prep_main(["images", "--input", str(tmp_path / "in"), "--out", out,
                           "--image-size", "8", "--quiet", "--strict"]) == 2
    with pytest.raises(IncompleteDataset):  # the failed rewrite left no complete dataset
        check_images_complete(out)


def test_parquet_cli_struct_bytes_and_string_labels(tmp_path):
    rng = np.random.default_rng(1)
    images = [_random_image(rng, 10, 10) for _ in range(5)]
    labels = ["b", "a", "c", "a", None]
    table = pa.table({"img": [{"bytes": _png(x), "path": None} for x in images], "y": labels})
    pq.write_table(table, tmp_path / "data.parquet")
    out = str(tmp_path / "pq")
    assert data_prep_main(["images", "--input", str(tmp_path / "data.parquet"), "--out", out,
                           "--image-size", "10", "--image-column", "img", "--label-column", "y",
                           "--shard-size", "2", "--quiet"]) == 0
    m = check_images_complete(out)
    assert m["classes"] == ["a", "b", "c"] and m["num_images"] == 4
    assert [s["count"] for s in m["shards"]] == [2, 2]
    assert m["problems"]["first"][0]["line"] == 5  # the null label, by row
    shards = ImageShards(out)
    for k in range(4):
        image, label = shards.get(k)
        assert np.array_equal(image, np.asarray(images[k])) and label == "abc".index(labels[k])


def test_parquet_missing_column_names_it(tmp_path):
    pq.write_table(pa.table({"image": [b"x"], "target": [1]}), tmp_path / "d.parquet")
    assert data_prep_main(["images", "--input", str(tmp_path / "d.parquet"), "--out",
                           str(tmp_path / "o"), "--quiet"]) == 2


def test_missing_shard_is_incomplete(digits, tmp_path):
    import shutil

    src = os.path.dirname(digits["data_prefix"])
    shutil.copytree(src, tmp_path / "copy")
    prefix = str(tmp_path / "copy" / os.path.basename(digits["data_prefix"]))
    check_images_complete(prefix)
    os.unlink(prefix + "-00000.labels.npy")
    with pytest.raises(IncompleteDataset, match="labels.npy"):
        check_images_complete(prefix)


def _raw(shards, dataset, i) -> np.ndarray:
    """The stored image behind sample ``i`` (recovered through its de-normalised pixels)."""
    m = shards.manifest
    x = dataset[i]["pixel_values"] * torch.tensor(m["std"]).view(3, 1, 1) \
        + torch.tensor(m["mean"]).view(3, 1, 1)
    return (x * 255).permute(1, 2, 0).numpy()


def test_split_is_fixed_disjoint_and_epochs_cover_train(digits):
    prefix = digits["data_prefix"]
    train_a, valid_a = build_image_datasets(prefix, seed=1, image_size=16, split="90,10,0")
    train_b, valid_b = build_image_datasets(prefix, seed=2, image_size=16, split="90,10,0")
    assert (len(train_a), len(valid_a)) == (1617, 180)
    assert np.array_equal(valid_a.indices, valid_b.indices)  # same valid set whatever the seed
    assert not set(train_a.indices) & set(valid_a.indices)
    train, _ = build_image_datasets(prefix, seed=3, image_size=16, num_samples=(3 * 1617, 5))
    labels = train.shards.labels[train.indices]
    for epoch in range(3):
        got = [int(train[epoch * 1617 + i]["labels"]) for i in range(1617)]
        assert np.array_equal(np.bincount(got, minlength=10), np.bincount(labels, minlength=10))
    assert [int(train[i]["labels"]) for i in range(20)] != \
        [int(train[1617 + i]["labels"]) for i in range(20)]  # reshuffled each epoch


def test_samples_pure_in_seed_and_index_and_augmentation_is_a_padded_crop(digits):
    prefix = digits["data_prefix"]
    a, valid = build_image_datasets(prefix, seed=5, image_size=16, num_samples=(4000, 400))
    b, _ = build_image_datasets(prefix, seed=5, image_size=16, num_samples=(4000, 400))
    c, _ = build_image_datasets(prefix, seed=6, image_size=16, num_samples=(4000, 400))
    for i in (0, 17, 3999):
        assert torch.equal(a[i]["pixel_values"], b[i]["pixel_values"])
    assert any(not torch.equal(a[i]["pixel_values"], c[i]["pixel_values"]) for i in range(8))
    shards, pad = a.shards, 16 // 8
    shifted = 0
    for i in range(12):
        k = int(a.indices[a._order(0)[i]])
        stored = shards.get(k)[0].astype(np.float32)
        padded = np.pad(stored, ((pad, pad), (pad, pad), (0, 0)))
        got = _raw(shards, a, i)
        windows = [padded[t:t + 16, s:s + 16] for t in range(2 * pad + 1)
                   for s in range(2 * pad + 1)]  # no flips: digits' manifest forbids them
        match = [np.abs(w - got).max() < 1e-3 for w in windows]
        assert any(match), i
        shifted += not match[len(windows) // 2]
    assert shifted > 0
    # valid: unaugmented, in order, wrapping past its end
    assert np.abs(_raw(shards, valid, 3) - shards.get(int(valid.indices[3]))[0]).max() < 1e-3
    assert torch.equal(valid[3]["pixel_values"], valid[183]["pixel_values"])


def test_collate_feeds_vit(digits):
    from transformers import ViTConfig, ViTForImageClassification

    train, _ = build_image_datasets(digits["data_prefix"], seed=0, image_size=16)
    batch = collate_images([train[i] for i in range(4)])
    assert batch["pixel_values"].shape == (4, 3, 16, 16) and batch["labels"].dtype == torch.long
    model = ViTForImageClassification(ViTConfig(
        hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
        image_size=16, patch_size=4, num_labels=10))
    out = model(**batch)
    assert out.logits.shape == (4, 10) and torch.isfinite(out.loss)


def test_bad_split_names_the_field(digits):
    with pytest.raises(ValueError, match="split"):
        build_image_datasets(digits["data_prefix"], 0, 16, split="100,0,0", num_samples=(10, 10))
    with pytest.raises(ValueError, match="split"):
        build_image_datasets(digits["data_prefix"], 0, 16, split="a,b")
