"""Tests for the real-dataset readers (taskgeom.data.real) on tiny files
written in the real formats."""

from __future__ import annotations

import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from PIL import Image
from scipy.io import savemat

from taskgeom.data.real import (
    NYU_INTRINSICS,
    ImageFolderClasses,
    ImageNetValDevkit,
    NYUDepthV2Labeled,
    read_nyu_split,
    square_intrinsics,
)


def _corner_image(height: int, width: int, mode: str = "RGB") -> Image.Image:
    """Dark frame whose top-left quadrant is red ("RGB") or white ("L")."""
    pixels = np.full((height, width, 3), 20, dtype=np.uint8)
    pixels[: height // 2, : width // 2] = (255, 0, 0) if mode == "RGB" else 255
    return Image.fromarray(pixels).convert(mode)


def _check_corner(image: torch.Tensor, red_only: bool = True) -> None:
    """The top-left corner is red, the other three corners dark."""
    assert image.dtype == torch.float32 and image.min() >= 0 and image.max() <= 1
    assert image[0, 0, 0] > 0.8
    if red_only:
        assert image[1:, 0, 0].max() < 0.2
    for corner in (image[:, 0, -1], image[:, -1, 0], image[:, -1, -1]):
        assert corner.max() < 0.2


# --------------------------------------------------------------------------- class folders


@pytest.fixture
def class_root(tmp_path: Path) -> Path:
    root = tmp_path / "imagenet-sketch"
    (root / "n02000000").mkdir(parents=True)
    (root / "n01000000").mkdir()
    (root / ".cache").mkdir()  # hidden folders are not classes
    _corner_image(40, 60).save(root / "n02000000" / "a.JPEG", quality=95)  # landscape
    _corner_image(60, 40).save(root / "n02000000" / "b.png")  # portrait
    _corner_image(30, 30, mode="L").save(root / "n01000000" / "c.jpg", quality=95)  # greyscale
    (root / "n01000000" / "notes.txt").write_text("not an image")
    return root


def test_image_folder_labels_shapes_orientation(class_root):
    data = ImageFolderClasses(class_root, resolution=16)
    assert data.classes == ["n01000000", "n02000000"]
    assert len(data) == 3
    names = {path.name: label for path, label in data.samples}
    assert names == {"c.jpg": 0, "a.JPEG": 1, "b.png": 1}
    for index in range(len(data)):
        image, label = data[index]
        assert image.shape == (3, 16, 16) and isinstance(label, int)
        _check_corner(image, red_only=data.samples[index][0].name != "c.jpg")


def test_image_folder_limit_is_class_balanced(class_root):
    data = ImageFolderClasses(class_root, resolution=8, limit=2)
    assert sorted(label for _, label in data.samples) == [0, 1]


def test_image_folder_errors(tmp_path, class_root):
    with pytest.raises(FileNotFoundError, match="missing.*class folders"):
        ImageFolderClasses(tmp_path / "missing", 8)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: expected class folders"):
        ImageFolderClasses(tmp_path / "empty", 8)
    (tmp_path / "no_images" / "n01000000").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no_images: no .* images"):
        ImageFolderClasses(tmp_path / "no_images", 8)
    (class_root / "n01000000" / "broken.png").write_bytes(b"not a png")
    data = ImageFolderClasses(class_root, 8)
    broken = next(i for i, (path, _) in enumerate(data.samples) if path.name == "broken.png")
    with pytest.raises(ValueError, match="broken.png: expected a JPEG or PNG image"):
        data[broken]
    with pytest.raises(ValueError, match="resolution"):
        ImageFolderClasses(class_root, 0)


# --------------------------------------------------------------------------- devkit layout


@pytest.fixture
def devkit(tmp_path: Path) -> tuple[Path, Path, Path]:
    images = tmp_path / "val"
    images.mkdir()
    for number in (1, 2, 3):
        _corner_image(48, 64).save(images / f"ILSVRC2012_val_{number:08d}.JPEG", quality=95)
    (images / "LOC_val_solution.csv").write_text("ignored")
    truth = tmp_path / "ILSVRC2012_validation_ground_truth.txt"
    truth.write_text("3\n1\n2\n")
    # meta.mat: ILSVRC2012_IDs are not in sorted-wnid order; ID 4 is an inner node.
    synsets = np.array([(1, "n03000000", "c", 0), (2, "n01000000", "a", 0), (3, "n02000000", "b", 0),
                        (4, "n00001740", "entity", 3)],
                       dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")])
    meta = tmp_path / "meta.mat"
    savemat(meta, {"synsets": synsets.reshape(-1, 1)})
    return images, truth, meta


def test_devkit_labels_follow_ground_truth_lines(devkit):
    images, truth, _ = devkit
    data = ImageNetValDevkit(images, truth, resolution=12)
    assert [label for _, label in data.samples] == [2, 0, 1]  # ILSVRC2012_ID - 1
    assert data.classes is None
    image, label = data[0]
    assert image.shape == (3, 12, 12) and label == 2
    _check_corner(image)
    assert len(ImageNetValDevkit(images, truth, resolution=12, limit=2)) == 2


def test_devkit_meta_maps_to_sorted_wnids(devkit, class_root):
    images, truth, meta = devkit
    data = ImageNetValDevkit(images, truth, resolution=12, meta_file=meta)
    assert data.classes == ["n01000000", "n02000000", "n03000000"]
    # Ground truth IDs 3, 1, 2 are wnids n02, n03, n01.
    assert [label for _, label in data.samples] == [1, 2, 0]


def test_devkit_errors(devkit, tmp_path):
    images, truth, meta = devkit
    with pytest.raises(FileNotFoundError, match="nowhere: expected a directory"):
        ImageNetValDevkit(tmp_path / "nowhere", truth, 8)
    with pytest.raises(FileNotFoundError, match="gt.txt: expected the devkit"):
        ImageNetValDevkit(images, tmp_path / "gt.txt", 8)
    short = tmp_path / "short.txt"
    short.write_text("3\n1\n")
    with pytest.raises(ValueError, match=r"short.txt: has 2 labels .* ILSVRC2012_val_00000003.JPEG needs line 3"):
        ImageNetValDevkit(images, short, 8)
    bad = tmp_path / "bad.txt"
    bad.write_text("3\nkit fox\n2\n")
    with pytest.raises(ValueError, match="bad.txt:2: expected a 1-based ILSVRC2012_ID"):
        ImageNetValDevkit(images, bad, 8)
    (tmp_path / "flat").mkdir()
    with pytest.raises(FileNotFoundError, match="flat: no ILSVRC2012_val_"):
        ImageNetValDevkit(tmp_path / "flat", truth, 8)
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("4\n1\n2\n")  # ID 4 is not a leaf class
    with pytest.raises(ValueError, match=r"meta.mat: no leaf synset for ILSVRC2012_ID\(s\) \[4\]"):
        ImageNetValDevkit(images, unknown, 8, meta_file=meta)


# --------------------------------------------------------------------------- NYU-Depth-V2


def _write_nyu_mat(path: Path, images: np.ndarray, depths: np.ndarray) -> None:
    """Write frames images (N, H, W, 3) uint8 and depths (N, H, W) like
    MATLAB's v7.3 writer: 512-byte MAT header userblock, then HDF5 datasets
    with the axes reversed, images (N, 3, W, H), depths and labels (N, W, H)."""
    with h5py.File(path, "w", userblock_size=512) as file:
        file.create_dataset("images", data=images.transpose(0, 3, 2, 1))
        file.create_dataset("depths", data=depths.transpose(0, 2, 1).astype(np.float32))
        file.create_dataset("labels", data=np.zeros(depths.shape, np.uint16).transpose(0, 2, 1))
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Thu Jan  1 00:00:00 2015 HDF5 schema 1.00 ."
    with open(path, "r+b") as raw:
        raw.write(header.ljust(116) + bytes(8) + b"\x00\x02" + b"IM")


def _frames(n: int, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Frames with a red top-left quadrant and depth 1 + row + col / 100 + frame."""
    images = np.stack([np.asarray(_corner_image(height, width)) for _ in range(n)])
    rows, cols = np.mgrid[:height, :width]
    depths = np.stack([1.0 + rows + cols / 100 + k for k in range(n)]).astype(np.float32)
    return images, depths


@pytest.fixture
def nyu_mat(tmp_path: Path) -> Path:
    path = tmp_path / "nyu_depth_v2_labeled.mat"
    _write_nyu_mat(path, *_frames(2, 12, 16))  # 4:3 frames like NYU's 480 x 640
    return path


def test_nyu_orientation_shapes_and_depth(nyu_mat):
    assert nyu_mat.read_bytes()[:10] == b"MATLAB 7.3"
    data = NYUDepthV2Labeled(nyu_mat, resolution=6)
    assert len(data) == 2
    item = data[1]
    assert set(item) == {"image", "depth", "K"}
    assert item["image"].shape == (3, 6, 6) and item["depth"].shape == (6, 6) and item["K"].shape == (3, 3)
    assert item["depth"].dtype == torch.float32 and item["K"].dtype == torch.float32
    _check_corner(item["image"])
    # Central 12 x 12 square (columns 2..13), nearest pixel of each 2 x 2 block: rows/cols 1, 3, ..., 11.
    src = np.arange(1, 12, 2)
    expected = 1.0 + src[:, None] + (2 + src[None, :]) / 100 + 1
    np.testing.assert_allclose(item["depth"].numpy(), expected, rtol=1e-6)


def test_nyu_split_indices_select_frames(nyu_mat, tmp_path):
    splits = tmp_path / "splits.mat"
    savemat(splits, {"trainNdxs": np.array([[1]]), "testNdxs": np.array([[2]])})  # 1-based, column vectors
    test = read_nyu_split(splits, "test")
    np.testing.assert_array_equal(test, [1])
    data = NYUDepthV2Labeled(nyu_mat, resolution=6, split_indices=test)
    assert len(data) == 1
    assert data[0]["depth"][0, 0] == pytest.approx(1.0 + 1 + 3 / 100 + 1)
    with pytest.raises(ValueError, match=r"split_indices must be 0-based indices in \[0, 2\)"):
        NYUDepthV2Labeled(nyu_mat, resolution=6, split_indices=[2])
    with pytest.raises(ValueError, match="'train' or 'test'"):
        read_nyu_split(splits, "val")


def test_nyu_intrinsics_follow_crop_and_resize(tmp_path):
    path = tmp_path / "full.mat"
    _write_nyu_mat(path, np.zeros((1, 480, 640, 3), np.uint8), np.ones((1, 480, 640), np.float32))
    fx, fy, cx, cy = NYU_INTRINSICS
    # Crop only: the 80 columns cut on the left shift cx; 1-based toolbox pixels -> 0-based.
    K = NYUDepthV2Labeled(path, resolution=480).K
    np.testing.assert_allclose(K, [[fx, 0, cx - 1 - 80], [0, fy, cy - 1], [0, 0, 1]], rtol=1e-6)
    # Halving: pixel edges scale, so the centre x maps to (x + 0.5) / 2 - 0.5.
    item = NYUDepthV2Labeled(path, resolution=240)[0]
    expected = [[fx / 2, 0, (cx - 1 - 80 + 0.5) / 2 - 0.5], [0, fy / 2, (cy - 1 + 0.5) / 2 - 0.5], [0, 0, 1]]
    np.testing.assert_allclose(item["K"].numpy(), expected, rtol=1e-6)
    # A small file is treated as a downsampled NYU frame: same field of view.
    small = tmp_path / "small.mat"
    _write_nyu_mat(small, *_frames(1, 48, 64))
    np.testing.assert_allclose(NYUDepthV2Labeled(small, resolution=240).K, expected, rtol=1e-6)


def test_square_intrinsics_maps_pixel_centres():
    """A point at the centre of source pixel (x, y) lands on the output pixel centre it resizes to."""
    K = square_intrinsics(100.0, 100.0, 50.0, 30.0, height=60, width=100, resolution=30)
    point = np.array([(25 - 50.0) / 100, (7 - 30.0) / 100, 1.0])  # projects to source (x=25, y=7)
    u, v, _ = K @ point
    # Crop left 20, then 60 -> 30: x' = (x - 20 + 0.5) / 2 - 0.5.
    assert (u, v) == pytest.approx(((25 - 20 + 0.5) / 2 - 0.5, (7 + 0.5) / 2 - 0.5))


def test_nyu_dataset_pickles_and_reopens(nyu_mat):
    data = NYUDepthV2Labeled(nyu_mat, resolution=6)
    first = data[0]["depth"]
    clone = pickle.loads(pickle.dumps(data))  # as DataLoader workers receive it
    assert torch.equal(clone[0]["depth"], first)


def test_nyu_errors(tmp_path, nyu_mat):
    with pytest.raises(FileNotFoundError, match="nope.mat: expected NYU-Depth-V2"):
        NYUDepthV2Labeled(tmp_path / "nope.mat", 8)
    text = tmp_path / "v5.mat"
    text.write_bytes(b"MATLAB 5.0 MAT-file" + bytes(200))
    with pytest.raises(ValueError, match="v5.mat: expected a MATLAB v7.3"):
        NYUDepthV2Labeled(text, 8)

    no_depths = tmp_path / "no_depths.mat"
    with h5py.File(no_depths, "w") as file:
        file.create_dataset("images", data=np.zeros((2, 3, 16, 12), np.uint8))
    with pytest.raises(ValueError, match=r"no_depths.mat: expected dataset 'depths' of shape \(N, 640, 480\)"):
        NYUDepthV2Labeled(no_depths, 8)

    wrong = tmp_path / "wrong.mat"
    with h5py.File(wrong, "w") as file:  # depths stored H x W instead of MATLAB's W x H
        file.create_dataset("images", data=np.zeros((2, 3, 16, 12), np.uint8))
        file.create_dataset("depths", data=np.zeros((2, 12, 16), np.float32))
    with pytest.raises(ValueError, match=r"wrong.mat: expected dataset 'depths'.*found shape \(2, 12, 16\)"):
        NYUDepthV2Labeled(wrong, 8)

    flat = tmp_path / "flat.mat"
    with h5py.File(flat, "w") as file:
        file.create_dataset("images", data=np.zeros((2, 16, 12), np.uint8))
    with pytest.raises(ValueError, match=r"flat.mat: expected dataset 'images' of shape \(N, 3, 640, 480\)"):
        NYUDepthV2Labeled(flat, 8)
