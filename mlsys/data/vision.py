"""Runtime image datasets over shards written by ``python -m data_prep images``.

``build_image_datasets`` splits the images once, by a fixed permutation (seed 0, independent of
the run's seed, so every run of a comparison validates on the same images), into train and
valid parts by ``split`` weights (``"train,valid,test"``; the test part is held out unused).

Train samples are a pure function of (shards, seed, index), like the text datasets: index ``i``
is image ``perm_e[i mod n]`` of epoch ``e = i div n`` (a fresh seeded permutation per epoch),
augmented with a random crop from the image zero-padded by ``image_size // 8`` on each side and,
when the manifest allows it, a horizontal flip with probability ½ — both drawn from a generator
seeded by (seed, i). So any rank, any process and a resumed run see the same sample at the same
index, and ``num_samples`` may exceed one epoch. Valid samples are the images unaugmented, in
order (index ``i`` → valid image ``i mod n``). Pixels are normalised by the per-channel mean and
std stored in the manifest. Samples: ``{"pixel_values": float32 3×S×S, "labels": int64 ()}``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from mlsys.data.image_shards import check_images_complete

SPLIT_SEED = 0


class ImageShards:
    """All images of one prefix, memory-mapped: ``get(k)`` -> (uint8 S×S×3, label)."""

    def __init__(self, prefix: str):
        self.manifest = check_images_complete(prefix)
        base = os.path.dirname(prefix)
        self.images = [np.load(os.path.join(base, s["images"]), mmap_mode="r")
                       for s in self.manifest["shards"]]
        labels = [np.load(os.path.join(base, s["labels"])) for s in self.manifest["shards"]]
        self.labels = np.concatenate(labels).astype(np.int64)
        self.starts = np.cumsum([0] + [len(x) for x in self.images])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def get(self, k: int) -> tuple[np.ndarray, int]:
        shard = int(np.searchsorted(self.starts, k, side="right")) - 1
        return self.images[shard][k - self.starts[shard]], int(self.labels[k])


def split_counts(n: int, split: str) -> tuple[int, int]:
    """(train, valid) image counts for ``"train,valid[,test]"`` weights; ValueError names split."""
    try:
        weights = [float(x) for x in split.split(",")]
    except ValueError:
        raise ValueError(f"split: expected comma-separated weights, got {split!r}") from None
    if len(weights) not in (2, 3) or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"split: expected 'train,valid[,test]' weights >= 0, got {split!r}")
    total = sum(weights)
    valid = round(n * weights[1] / total)
    train = min(n - valid, round(n * weights[0] / total))
    if train < 1 or (weights[1] > 0 and valid < 1):
        raise ValueError(f"split: {split!r} leaves an empty part of {n} images")
    return train, valid


class ImageDataset(Sequence):
    """``num_samples`` samples over the images ``indices`` of ``shards`` (see module doc)."""

    def __init__(self, shards: ImageShards, indices: np.ndarray, seed: int, image_size: int,
                 num_samples: int, train: bool):
        m = shards.manifest
        self.shards, self.indices, self.seed = shards, indices, seed
        self.image_size, self.num_samples, self.train = image_size, num_samples, train
        self.hflip = bool(m["hflip"])
        self.pad = m["image_size"] // 8
        self.mean = torch.tensor(m["mean"], dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(m["std"], dtype=torch.float32).view(3, 1, 1)
        self._epoch: tuple[int, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.num_samples

    def _order(self, epoch: int) -> np.ndarray:
        if self._epoch is None or self._epoch[0] != epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.indices))
            self._epoch = (epoch, perm)
        return self._epoch[1]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} outside [0, {self.num_samples})")
        n = len(self.indices)
        k = self._order(i // n)[i % n] if self.train else i % n
        image, label = self.shards.get(int(self.indices[k]))
        x = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255.0
        if self.train:
            x = self._augment(x, np.random.default_rng([self.seed, i, 1]))
        if x.shape[-1] != self.image_size:
            x = F.interpolate(x[None], size=(self.image_size, self.image_size),
                              mode="bilinear", align_corners=False, antialias=True)[0]
        return {"pixel_values": (x - self.mean) / self.std,
                "labels": torch.tensor(label, dtype=torch.long)}

    def _augment(self, x: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        size, p = x.shape[-1], self.pad
        if p:
            top, left = (int(v) for v in rng.integers(0, 2 * p + 1, size=2))
            x = F.pad(x, (p, p, p, p))[:, top:top + size, left:left + size]
        if self.hflip and rng.random() < 0.5:
            x = x.flip(-1)
        return x


def build_image_datasets(prefix: str, seed: int, image_size: int, split: str = "90,10,0",
                         num_samples: tuple[int | None, int | None] = (None, None),
                         ) -> tuple[ImageDataset, ImageDataset]:
    """(train, valid) over ``prefix``; ``num_samples`` (None: one pass) sets each length."""
    shards = ImageShards(prefix)
    train_n, valid_n = split_counts(len(shards), split)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(shards))
    parts = order[:train_n], order[train_n:train_n + valid_n]
    if valid_n == 0 and num_samples[1]:
        raise ValueError(f"split: {split!r} has no valid images, {num_samples[1]} requested")
    return tuple(ImageDataset(shards, idx, seed, image_size, n if n is not None else len(idx),
                              train=is_train)
                 for idx, n, is_train in zip(parts, num_samples, (True, False), strict=True))


def collate_images(samples: list[dict]) -> dict[str, torch.Tensor]:
    """Stack samples into ``ViTForImageClassification`` inputs (``pixel_values``, ``labels``)."""
    return {"pixel_values": torch.stack([s["pixel_values"] for s in samples]),
            "labels": torch.stack([s["labels"] for s in samples])}
