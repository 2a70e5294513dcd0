"""Readers for the paper's real datasets, as `torch.utils.data.Dataset`s.

- ImageNet-val in class folders, or ImageNet-Sketch (same layout):
  `ImageFolderClasses`.
- ImageNet-val as distributed (flat files + devkit ground truth):
  `ImageNetValDevkit`.
- NYU-Depth-V2 labeled set (`nyu_depth_v2_labeled.mat`, MATLAB v7.3 = HDF5):
  `NYUDepthV2Labeled`.

Conventions, shared with `taskgeom.data.world`: images come out as float32
tensors (3, R, R) in [0, 1], the central square of the frame resized to
R x R; intrinsics use OpenCV pixel centres (pixel (row i, column j) sits at
image point (x=j, y=i), 0-based). A missing, empty or malformed input raises
FileNotFoundError / ValueError naming the path and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

IMAGE_EXTENSIONS: tuple[str, ...] = (".jpeg", ".jpg", ".png")
VAL_FILENAME = re.compile(r"ILSVRC2012_val_(\d{8})\.(jpeg|jpg|png)", re.IGNORECASE)

# RGB intrinsics (fx, fy, cx, cy) of the NYU-Depth-V2 toolbox (camera_params.m),
# which applies them to 1-based MATLAB pixel indices (rgb_plane2rgb_world.m).
NYU_INTRINSICS: tuple[float, float, float, float] = (518.857901, 519.469611, 325.582449, 253.736166)


# --------------------------------------------------------------------------- shared helpers


def center_square(height: int, width: int) -> tuple[int, int, int]:
    """(top, left, side) of the largest centred square in a height x width frame.

    Args:
        height: the frame's height in pixels.
        width: its width.

    Returns:
        (top, left, side), side = min(height, width).
    """
    side = min(height, width)
    return (height - side) // 2, (width - side) // 2, side


def square_intrinsics(fx: float, fy: float, cx: float, cy: float, height: int, width: int,
                      resolution: int) -> np.ndarray:
    """(3, 3) intrinsics after cropping the central square of a height x width
    frame and resizing it to resolution x resolution. With OpenCV pixel
    centres a resize by s maps x to s (x + 0.5) - 0.5; a crop shifts by its offset.

    Args:
        fx: focal length in pixels along x.
        fy: along y.
        cx: principal point x, 0-based OpenCV pixels.
        cy: principal point y.
        height: the frame's height.
        width: the frame's width.
        resolution: R, the output side.

    Returns:
        (3, 3) float64 K of the R x R image.
    """
    top, left, side = center_square(height, width)
    s = resolution / side
    return np.array([[fx * s, 0.0, s * (cx - left + 0.5) - 0.5],
                     [0.0, fy * s, s * (cy - top + 0.5) - 0.5],
                     [0.0, 0.0, 1.0]])


def _to_tensor(image: Image.Image) -> torch.Tensor:
    """PIL RGB image -> float32 (3, H, W) in [0, 1]."""
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1).contiguous()


def _square_resize(image: Image.Image, resolution: int) -> Image.Image:
    """Central square of `image`, resized (bilinear, antialiased) to resolution x resolution."""
    top, left, side = center_square(image.height, image.width)
    return image.resize((resolution, resolution), Image.Resampling.BILINEAR, box=(left, top, left + side, top + side))


def load_image(path: Path, resolution: int) -> torch.Tensor:
    """Image file -> float32 (3, R, R) in [0, 1]. Greyscale, palette and CMYK
    files (all occur in ImageNet) are converted to RGB.

    Args:
        path: a JPEG or PNG file.
        resolution: R; the central square is resized to R x R (bilinear, antialiased).

    Returns:
        (3, R, R) float32; ValueError naming the file if it cannot be decoded.
    """
    try:
        with Image.open(path) as image:
            return _to_tensor(_square_resize(image.convert("RGB"), resolution))
    except OSError as err:  # PIL raises OSError subclasses for unreadable or truncated files
        raise ValueError(f"{path}: expected a JPEG or PNG image, could not decode it ({err})") from err


def _check_resolution(resolution: int, limit: int | None) -> None:
    if resolution < 1:
        raise ValueError(f"resolution must be a positive number of pixels, got {resolution}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}")


# --------------------------------------------------------------------------- ImageNet


class ImageFolderClasses(Dataset):
    """Images in class folders, `root/<wnid>/<name>.{JPEG,jpg,png}`: ImageNet-val
    rearranged by class or ImageNet-Sketch.

    Labels index the sorted class-folder names (`self.classes`), i.e. the
    usual ImageNet class order for the 1000 wnids; every subfolder counts as
    a class, even an empty one, so labels stay aligned across datasets.
    Samples are interleaved across classes (first image of every class, then
    the second, ...), so `limit` keeps a class-balanced subset (items: ``__getitem__``).
    """

    def __init__(self, root: str | Path, resolution: int, limit: int | None = None) -> None:
        """Index the class folders (nothing is decoded yet).

        Args:
            root: the directory of class folders.
            resolution: R, the side of the images returned.
            limit: keep the first ``limit`` samples of the interleaved order; None for all.
        """
        _check_resolution(resolution, limit)
        self.root, self.resolution = Path(root), resolution
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: expected a directory of class folders (e.g. n01440764/*.JPEG)")
        self.classes = sorted(d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not self.classes:
            raise FileNotFoundError(f"{self.root}: expected class folders (e.g. n01440764/*.JPEG), found none")
        per_class = [sorted(p for p in (self.root / c).iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
                     for c in self.classes]
        ranked = sorted((rank, label, path) for label, paths in enumerate(per_class) for rank, path in enumerate(paths))
        if not ranked:
            raise FileNotFoundError(f"{self.root}: no {'/'.join(IMAGE_EXTENSIONS)} images in its class folders")
        self.samples = [(path, label) for _, label, path in ranked][:limit]

    def __len__(self) -> int:
        """The number of samples."""
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """Sample ``index``: (image (3, R, R) float32 in [0, 1], label int)."""
        path, label = self.samples[index]
        return load_image(path, self.resolution), label


def read_ground_truth(labels_file: Path) -> np.ndarray:
    """ILSVRC2012_validation_ground_truth.txt -> 1-based ILSVRC2012_IDs (line k: ILSVRC2012_val_%08d number k).

    Args:
        labels_file: the devkit's ground-truth file.

    Returns:
        (N,) int64 ILSVRC2012_IDs.
    """
    if not labels_file.is_file():
        raise FileNotFoundError(f"{labels_file}: expected the devkit's ILSVRC2012_validation_ground_truth.txt")
    ids = []
    for number, line in enumerate(labels_file.read_text().splitlines(), start=1):
        text = line.strip()
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{labels_file}:{number}: expected a 1-based ILSVRC2012_ID, got {line!r}")
        ids.append(int(text))
    if not ids:
        raise ValueError(f"{labels_file}: expected one ILSVRC2012_ID per line, the file is empty")
    return np.array(ids, dtype=np.int64)


def read_devkit_meta(meta_file: Path) -> dict[int, str]:
    """devkit data/meta.mat (MATLAB v5) -> {ILSVRC2012_ID: wnid} of leaf synsets (num_children 0): 1000 classes.

    Args:
        meta_file: the devkit's data/meta.mat.

    Returns:
        ILSVRC2012_ID -> wnid.
    """
    from scipy.io import loadmat  # only needed for this optional file

    if not meta_file.is_file():
        raise FileNotFoundError(f"{meta_file}: expected the devkit's data/meta.mat")
    try:
        synsets = np.atleast_1d(loadmat(meta_file, squeeze_me=True)["synsets"])
    except (ValueError, KeyError, OSError) as err:
        raise ValueError(f"{meta_file}: expected a MATLAB file with a 'synsets' struct array ({err})") from err
    leaves = synsets[np.array([int(n) == 0 for n in synsets["num_children"]])]
    return {int(i): str(w) for i, w in zip(leaves["ILSVRC2012_ID"], leaves["WNID"])}


class ImageNetValDevkit(Dataset):
    """ImageNet-val as distributed: `images_dir/ILSVRC2012_val_00000001.JPEG`, ...
    plus the devkit's ground-truth file (one 1-based ILSVRC2012_ID per line,
    in file-number order).

    ILSVRC2012_IDs do not follow the sorted-wnid order that classifiers (and
    `ImageFolderClasses`) use. Without `meta_file`, label = ILSVRC2012_ID - 1;
    with the devkit's `data/meta.mat`, label = index of the image's wnid in
    the sorted wnids (`self.classes`), matching the class-folder layout.
    `limit` keeps the first files by number (ImageNet-val's order is already
    mixed across classes). Items: (image (3, R, R) float32 in [0, 1], label int).
    """

    def __init__(self, images_dir: str | Path, labels_file: str | Path, resolution: int, limit: int | None = None,
                 meta_file: str | Path | None = None) -> None:
        """Index the files and their labels (nothing is decoded yet).

        Args:
            images_dir: the directory of ILSVRC2012_val_*.JPEG files.
            labels_file: the devkit's ILSVRC2012_validation_ground_truth.txt.
            resolution: R, the side of the images returned.
            limit: keep the first ``limit`` files by number; None for all.
            meta_file: the devkit's data/meta.mat, for labels in sorted-wnid order; None for ID − 1.
        """
        _check_resolution(resolution, limit)
        self.images_dir, self.resolution = Path(images_dir), resolution
        if not self.images_dir.is_dir():
            raise FileNotFoundError(f"{self.images_dir}: expected a directory of ILSVRC2012_val_*.JPEG files")
        files = sorted((int(m.group(1)), p) for p in self.images_dir.iterdir() if (m := VAL_FILENAME.fullmatch(p.name)))
        if not files:
            raise FileNotFoundError(f"{self.images_dir}: no ILSVRC2012_val_XXXXXXXX.JPEG files")
        labels_file = Path(labels_file)
        ids = read_ground_truth(labels_file)
        for number, path in (files[0], files[-1]):
            if not 1 <= number <= len(ids):
                raise ValueError(f"{labels_file}: has {len(ids)} labels (lines 1..{len(ids)}), "
                                 f"but {path.name} needs line {number}")
        if meta_file is None:
            self.classes: list[str] | None = None
            labels = ids - 1
        else:
            wnid_of = read_devkit_meta(Path(meta_file))
            self.classes = sorted(wnid_of.values())
            index = {w: k for k, w in enumerate(self.classes)}
            missing = sorted(set(ids.tolist()) - set(wnid_of))
            if missing:
                raise ValueError(f"{meta_file}: no leaf synset for ILSVRC2012_ID(s) {missing[:5]} "
                                 f"used in {labels_file}")
            labels = np.array([index[wnid_of[i]] for i in ids.tolist()], dtype=np.int64)
        self.samples = [(p, int(labels[n - 1])) for n, p in files][:limit]

    def __len__(self) -> int:
        """The number of samples."""
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """Sample ``index``: (image (3, R, R) float32 in [0, 1], label)."""
        path, label = self.samples[index]
        return load_image(path, self.resolution), label


# --------------------------------------------------------------------------- NYU-Depth-V2


def read_nyu_split(splits_file: str | Path, split: str) -> np.ndarray:
    """The standard 795/654 train/test split of `splits.mat` (MATLAB v5, 1-based `trainNdxs` / `testNdxs`).

    Args:
        splits_file: NYU-Depth-V2's splits.mat.
        split: "train" or "test".

    Returns:
        (n,) int64 0-based image indices, for `NYUDepthV2Labeled`.
    """
    from scipy.io import loadmat  # only needed for this optional file

    path, key = Path(splits_file), {"train": "trainNdxs", "test": "testNdxs"}.get(split)
    if key is None:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: expected NYU-Depth-V2's splits.mat")
    data = loadmat(path)
    if key not in data:
        raise ValueError(f"{path}: expected variable {key!r} (1-based image indices)")
    return np.asarray(data[key], dtype=np.int64).ravel() - 1


def _describe(node: h5py.HLObject | None) -> str:
    """What an HDF5 path holds, for error messages."""
    if node is None:
        return "nothing"
    if isinstance(node, h5py.Dataset):
        return f"shape {node.shape} {node.dtype}"
    return f"a {type(node).__name__}"


class NYUDepthV2Labeled(Dataset):
    """NYU-Depth-V2 labeled set, read lazily from `nyu_depth_v2_labeled.mat`.

    The .mat is MATLAB v7.3, i.e. HDF5 with MATLAB's column-major axes
    reversed: `images` is (N, 3, W, H) uint8 and `depths` (N, W, H) float32
    metres, with W = 640, H = 480 in the real file (other sizes are accepted);
    so a frame is `images[n].transpose(2, 1, 0)` (H, W, 3) and `depths[n].T`.
    The file is opened on first access in each process (h5py handles do not
    survive fork/pickle) and only the requested frame is read.

    Items: {"image": (3, R, R) float32 in [0, 1] (bilinear),
            "depth": (R, R) float32 metres (nearest neighbour, so no values are
                     invented across depth edges),
            "K": (3, 3) float32 intrinsics of the crop}, all for the central
    H x H square resized to R x R. K is the toolbox's NYU_INTRINSICS moved to
    0-based OpenCV pixels (cx - 1, cy - 1), rescaled to W x H if the file's
    frames are not 640 x 480 (same field of view), then cropped and resized.
    `split_indices` are 0-based image indices (see `read_nyu_split`).
    """

    def __init__(self, mat_path: str | Path, resolution: int, split_indices: Sequence[int] | None = None) -> None:
        """Check the file's datasets and the indices, and derive the crop's intrinsics.

        Args:
            mat_path: nyu_depth_v2_labeled.mat.
            resolution: R, the side of the items returned.
            split_indices: 0-based image indices (``read_nyu_split``); None for every frame.
        """
        _check_resolution(resolution, None)
        self.path, self.resolution = Path(mat_path), resolution
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: expected NYU-Depth-V2's nyu_depth_v2_labeled.mat (MATLAB v7.3)")
        try:
            file = h5py.File(self.path, "r")
        except OSError as err:
            raise ValueError(f"{self.path}: expected a MATLAB v7.3 (HDF5) .mat file, "
                             f"h5py cannot open it ({err})") from err
        with file:
            n, width, height = self._check(file)
        indices = np.arange(n) if split_indices is None else np.asarray(split_indices, dtype=np.int64).ravel()
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            raise ValueError(f"{self.path}: split_indices must be 0-based indices in [0, {n}), "
                             f"got range [{indices.min()}, {indices.max()}]")
        self.indices, self.height, self.width = indices, height, width
        fx, fy, cx, cy = NYU_INTRINSICS
        sx, sy = width / 640, height / 480  # 1 for the real file
        # cx - 1: 1-based MATLAB pixels to 0-based; then x -> s (x + 0.5) - 0.5.
        self.K = square_intrinsics(fx * sx, fy * sy, sx * (cx - 0.5) - 0.5, sy * (cy - 0.5) - 0.5,
                                   height, width, resolution).astype(np.float32)
        top, left, side = center_square(height, width)
        # Nearest source pixel of each output pixel centre: floor((j + 0.5) * side / R).
        src = np.floor((np.arange(resolution) + 0.5) * side / resolution).astype(np.int64)
        self._rows, self._cols = top + src, left + src
        self._file: h5py.File | None = None

    def _check(self, file: h5py.File) -> tuple[int, int, int]:
        """Validate the datasets; returns (N, W, H)."""
        images, depths = file.get("images"), file.get("depths")
        if not (isinstance(images, h5py.Dataset) and images.ndim == 4 and images.shape[1] == 3
                and images.dtype == np.uint8):
            raise ValueError(f"{self.path}: expected dataset 'images' of shape (N, 3, 640, 480) uint8, "
                             f"found {_describe(images)}")
        n, _, width, height = images.shape
        if not (isinstance(depths, h5py.Dataset) and depths.shape == (n, width, height)
                and np.issubdtype(depths.dtype, np.floating)):
            raise ValueError(f"{self.path}: expected dataset 'depths' of shape (N, 640, 480) float, here "
                             f"{(n, width, height)} to match 'images', found {_describe(depths)}")
        if n == 0:
            raise ValueError(f"{self.path}: 'images' holds no frames")
        return n, width, height

    def __getstate__(self) -> dict:
        """The state to pickle, without the open file (reopened in the new process)."""
        return {**self.__dict__, "_file": None}

    def __len__(self) -> int:
        """The number of frames of the split."""
        return len(self.indices)

    def frame(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Item ``index`` at the file's size.

        Args:
            index: the item, into ``split_indices``.

        Returns:
            RGB (H, W, 3) uint8 and depth (H, W) float32 metres.
        """
        if self._file is None:
            self._file = h5py.File(self.path, "r")
        n = int(self.indices[index])
        rgb = np.ascontiguousarray(self._file["images"][n].transpose(2, 1, 0))  # (3, W, H) -> (H, W, 3)
        return rgb, np.ascontiguousarray(self._file["depths"][n].T, dtype=np.float32)  # (W, H) -> (H, W)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        """Item ``index``: image (3, R, R), depth (R, R) and K (3, 3), see the class docstring."""
        rgb, depth = self.frame(index)
        image = _to_tensor(_square_resize(Image.fromarray(rgb), self.resolution))
        depth = depth[self._rows[:, None], self._cols[None, :]].astype(np.float32)
        return {"image": image, "depth": torch.from_numpy(depth), "K": torch.from_numpy(self.K.copy())}
