"""The built-in ``synthetic`` dataset: procedural shape-and-texture images, deterministic from a seed.

Why it exists: real datasets cannot be downloaded here, and tests and CPU demos need a dataset
that is small, instant and still discriminates between architectures. Each class is a pair
(shape, texture): a shape (disk, square, ring, ...) filled with a texture (stripes, checkerboard,
dots, ...). Recognising the class needs BOTH the global outline (shape, a long-range cue that
attention handles well) and the local pattern inside it (texture, a short-range cue that
convolutions handle well), so conv-heavy and attention-heavy layouts can differ on it.

Nuisances make it non-trivial on raw pixels: random position, scale, aspect, rotation jitter,
random hues (color is never a cue; the foreground is brighter than the background so that
the outline is visible patch by patch), texture phase/frequency/orientation jitter, a lighting
gradient, Gaussian noise, and a low-contrast distractor texture of ANOTHER class's texture in the
background, so finding the texture without locating the shape is not enough.

Generation is vectorised over images (a Python loop only over the shape and texture kinds and
over fixed-size chunks), so 10,000 32x32 images take a fraction of a second on one CPU core.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from trials.config.data_config import MAX_CLASSES as CONFIG_MAX_CLASSES

SHAPES = ("disk", "square", "triangle", "cross", "ring", "diamond", "star", "ellipse", "frame", "half_disk")
TEXTURES = (
    "horizontal_stripes",
    "vertical_stripes",
    "diagonal_stripes",
    "antidiagonal_stripes",
    "checkerboard",
    "dots",
    "solid",
    "concentric_rings",
    "grid_lines",
    "waves",
)
MAX_CLASSES = len(SHAPES) * len(TEXTURES)
assert MAX_CLASSES == CONFIG_MAX_CLASSES, "trials.config.data_config.MAX_CLASSES must match the shapes and textures"

# Images are generated in chunks of this many so that memory stays bounded for large datasets.
# It is a constant because the noise stream is drawn chunk by chunk: changing it changes the images.
_CHUNK = 2048

# Rotation jitter is kept well below 45 degrees so that orientation-dependent classes
# (square vs diamond, horizontal vs vertical stripes) stay distinct.
_MAX_SHAPE_ROTATION = math.radians(15.0)
_MAX_TEXTURE_ROTATION = math.radians(10.0)


def class_grid(num_classes: int) -> tuple[int, int]:
    """(number of shapes, number of textures) used for ``num_classes`` classes.

    The grid is as square as possible (e.g. 10 classes -> 4 shapes x 3 textures), so that
    both cues carry information at every class count; class ``c`` is shape ``c % S`` with
    texture ``c // S``.
    """
    if not 2 <= num_classes <= MAX_CLASSES:
        raise ValueError(f"num_classes must be in [2, {MAX_CLASSES}], got {num_classes}")
    shapes = min(len(SHAPES), math.ceil(math.sqrt(num_classes)))
    textures = math.ceil(num_classes / shapes)
    return shapes, textures


def describe_class(label: int, num_classes: int) -> str:
    """Human-readable name of a class, e.g. ``"ring/checkerboard"``."""
    shapes, _ = class_grid(num_classes)
    return f"{SHAPES[label % shapes]}/{TEXTURES[label // shapes]}"


# --- shapes: approximate signed distance in units of the shape radius (negative inside) ---


def _polar(u: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    return torch.sqrt(u * u + v * v), torch.atan2(v, u)


def _disk(u: Tensor, v: Tensor) -> Tensor:
    return torch.sqrt(u * u + v * v) - 1.0


def _square(u: Tensor, v: Tensor) -> Tensor:
    return torch.maximum(u.abs(), v.abs()) - 0.8


def _triangle(u: Tensor, v: Tensor) -> Tensor:
    # Equilateral, apex up (image v grows downwards): the maximum over three edge half-planes.
    d = v
    for angle in (math.pi / 2 + 2 * math.pi / 3, math.pi / 2 + 4 * math.pi / 3):
        d = torch.maximum(d, u * math.cos(angle) + v * math.sin(angle))
    return d - 0.55


def _cross(u: Tensor, v: Tensor) -> Tensor:
    au, av = u.abs(), v.abs()
    return torch.minimum(torch.maximum(au - 0.3, av - 0.95), torch.maximum(av - 0.3, au - 0.95))


def _ring(u: Tensor, v: Tensor) -> Tensor:
    return (torch.sqrt(u * u + v * v) - 0.7).abs() - 0.3


def _diamond(u: Tensor, v: Tensor) -> Tensor:
    return (u.abs() + v.abs() - 1.05) / math.sqrt(2.0)


def _star(u: Tensor, v: Tensor) -> Tensor:
    r, theta = _polar(u, v)
    return (r - (0.62 + 0.38 * torch.cos(5.0 * theta + math.pi / 2))) * 0.6


def _ellipse(u: Tensor, v: Tensor) -> Tensor:
    return (torch.sqrt(u * u + (v / 0.5) ** 2) - 1.0) * 0.5


def _frame(u: Tensor, v: Tensor) -> Tensor:
    return (torch.maximum(u.abs(), v.abs()) - 0.65).abs() - 0.2


def _half_disk(u: Tensor, v: Tensor) -> Tensor:
    return torch.maximum(torch.sqrt(u * u + (v - 0.3) ** 2) - 1.0, v - 0.3)


_SHAPE_FNS: tuple[Callable[[Tensor, Tensor], Tensor], ...] = (
    _disk,
    _square,
    _triangle,
    _cross,
    _ring,
    _diamond,
    _star,
    _ellipse,
    _frame,
    _half_disk,
)

# --- textures: a value roughly in [-1, 1] at image coordinates (x, y) rotated by a small jitter ---


def _texture(kind: int, x: Tensor, y: Tensor, r: Tensor) -> Tensor:
    """Texture ``kind`` at phase-shifted, rotated coordinates scaled to radians per period.

    ``r`` is the distance (same scale) to the texture's own centre, for concentric rings.
    """
    if kind == 0:
        return torch.sin(y)
    if kind == 1:
        return torch.sin(x)
    if kind == 2:
        return torch.sin((x + y) / math.sqrt(2.0))
    if kind == 3:
        return torch.sin((x - y) / math.sqrt(2.0))
    if kind == 4:
        return 2.0 * torch.sin(x) * torch.sin(y)
    if kind == 5:
        return 2.0 * (torch.cos(x) + torch.cos(y) - 0.9)
    if kind == 6:
        return torch.ones_like(x)
    if kind == 7:
        return torch.sin(r)
    if kind == 8:
        return 3.0 * (torch.maximum(torch.cos(x), torch.cos(y)) - 0.75)
    return torch.sin(y + 1.5 * torch.sin(0.6 * x))


def _uniform(n: int, low: float, high: float, gen: torch.Generator) -> Tensor:
    return low + (high - low) * torch.rand(n, generator=gen)


def _unit_vectors(n: int, gen: torch.Generator, dims: int = 3) -> Tensor:
    v = torch.randn(n, dims, generator=gen)
    return v / v.norm(dim=1, keepdim=True).clamp_min(1e-6)


def _separated_colors(n: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Background and foreground colors (RGB in [0, 1]): a dark background, a bright foreground.

    Hues are random and never depend on the class; the brightness step makes the shape's
    outline visible to a single patch, so that shape is a learnable global cue.
    """
    bg = torch.rand(n, 3, generator=gen) * 0.45
    fg = 0.55 + torch.rand(n, 3, generator=gen) * 0.45
    return bg, fg


def _draw_parameters(
    labels: Tensor, num_textures: int, shapes: int, size: int, gen: torch.Generator
) -> dict[str, Tensor]:
    """Every per-image random quantity, drawn up front so chunking cannot change them."""
    n = labels.numel()
    radius = _uniform(n, 0.25, 0.4, gen) * size
    margin = radius * 0.8
    cx = margin + torch.rand(n, generator=gen) * (size - 2 * margin)
    cy = margin + torch.rand(n, generator=gen) * (size - 2 * margin)
    texture = labels // shapes
    others = num_textures if num_textures >= 2 else len(TEXTURES)
    # A different texture: among the textures in use, so the distractor is another class's cue.
    distractor = (texture + 1 + torch.randint(0, others - 1, (n,), generator=gen)) % others
    bg, fg = _separated_colors(n, gen)
    return {
        "shape": labels % shapes,
        "texture": texture,
        "distractor": distractor,
        "cx": cx,
        "cy": cy,
        "radius": radius,
        "aspect": _uniform(n, -0.15, 0.15, gen).exp(),
        "rotation": _uniform(n, -_MAX_SHAPE_ROTATION, _MAX_SHAPE_ROTATION, gen),
        "bg": bg,
        "fg": fg,
        "fg_contrast": _uniform(n, 0.45, 0.7, gen)[:, None] * _unit_vectors(n, gen),
        "bg_contrast": _uniform(n, 0.08, 0.2, gen)[:, None] * _unit_vectors(n, gen),
        # Texture periods in pixels scale with the image so the pattern is resolvable at 32x32.
        "fg_tex": _texture_params(n, size, gen),
        "bg_tex": _texture_params(n, size, gen),
        "gradient": _uniform(n, 0.0, 0.15, gen)[:, None] * _unit_vectors(n, gen, dims=2),
        "noise": _uniform(n, 0.02, 0.06, gen),
    }


def _texture_params(n: int, size: int, gen: torch.Generator) -> Tensor:
    """Per-image (frequency, phase x, phase y, angle, centre x, centre y) of a texture."""
    period = _uniform(n, 5.0, 7.0, gen) * (size / 32.0)
    return torch.stack(
        [
            2 * math.pi / period,
            _uniform(n, 0.0, 2 * math.pi, gen),
            _uniform(n, 0.0, 2 * math.pi, gen),
            _uniform(n, -_MAX_TEXTURE_ROTATION, _MAX_TEXTURE_ROTATION, gen),
            _uniform(n, 0.0, size, gen),
            _uniform(n, 0.0, size, gen),
        ],
        dim=1,
    )


def _shape_mask(p: dict[str, Tensor], grid_x: Tensor, grid_y: Tensor) -> Tensor:
    """Soft (anti-aliased) foreground mask (n, H, W): shape kind by kind, only on its images."""
    n = p["shape"].numel()
    mask = torch.empty(n, *grid_x.shape)
    for kind, fn in enumerate(_SHAPE_FNS):
        idx = (p["shape"] == kind).nonzero().flatten()
        if idx.numel() == 0:
            continue
        dx = grid_x - p["cx"][idx, None, None]
        dy = grid_y - p["cy"][idx, None, None]
        cos, sin = p["rotation"][idx].cos()[:, None, None], p["rotation"][idx].sin()[:, None, None]
        radius = p["radius"][idx, None, None]
        aspect = p["aspect"][idx, None, None]
        u = (dx * cos + dy * sin) / (radius * aspect)
        v = (-dx * sin + dy * cos) * aspect / radius
        # Distance in pixels -> about one pixel of linear ramp across the edge.
        mask[idx] = (0.5 - fn(u, v) * radius).clamp(0.0, 1.0)
    return mask


def _pattern(kinds: Tensor, params: Tensor, grid_x: Tensor, grid_y: Tensor) -> Tensor:
    """Texture intensity in [0, 1] (n, H, W) for each image's texture kind and parameters."""
    n = kinds.numel()
    out = torch.empty(n, *grid_x.shape)
    for kind in range(len(TEXTURES)):
        idx = (kinds == kind).nonzero().flatten()
        if idx.numel() == 0:
            continue
        freq, phase_x, phase_y, angle, center_x, center_y = (params[idx, i, None, None] for i in range(6))
        cos, sin = angle.cos(), angle.sin()
        x = (grid_x * cos + grid_y * sin) * freq + phase_x
        y = (-grid_x * sin + grid_y * cos) * freq + phase_y
        r = torch.sqrt((grid_x - center_x) ** 2 + (grid_y - center_y) ** 2) * freq
        # Sharpened to nearly two-tone: textures are patterns, not shading.
        out[idx] = (0.5 + 1.5 * _texture(kind, x, y, r)).clamp(0.0, 1.0)
    return out


def _render(p: dict[str, Tensor], size: int, gen: torch.Generator) -> Tensor:
    """Float images (n, 3, H, W) in [0, 1] from per-image parameters."""
    coords = torch.arange(size, dtype=torch.float32) + 0.5
    grid_y, grid_x = torch.meshgrid(coords, coords, indexing="ij")
    mask = _shape_mask(p, grid_x, grid_y)[:, None]
    fg_pattern = _pattern(p["texture"], p["fg_tex"], grid_x, grid_y)[:, None] - 0.5
    bg_pattern = _pattern(p["distractor"], p["bg_tex"], grid_x, grid_y)[:, None] - 0.5
    fg = p["fg"][:, :, None, None] + fg_pattern * p["fg_contrast"][:, :, None, None]
    bg = p["bg"][:, :, None, None] + bg_pattern * p["bg_contrast"][:, :, None, None]
    image = torch.lerp(bg, fg, mask)
    centered = (coords - size / 2) / size
    light = (
        p["gradient"][:, 0, None, None] * centered[None, None, :]
        + p["gradient"][:, 1, None, None] * centered[None, :, None]
    )
    image += light[:, None]
    image += torch.randn(image.shape, generator=gen) * p["noise"][:, None, None, None]
    return image.clamp_(0.0, 1.0)


def balanced_labels(num_images: int, num_classes: int, gen: torch.Generator) -> Tensor:
    """Labels 0..C-1 in random order, each used equally often (differing by at most one)."""
    labels = torch.arange(num_images) % num_classes
    return labels[torch.randperm(num_images, generator=gen)]


def make_synthetic(num_images: int, num_classes: int, seed: int, image_size: int = 32) -> tuple[Tensor, Tensor]:
    """Generate the synthetic dataset.

    Returns uint8 images (N, 3, H, W) and int64 labels (N,) with balanced classes. The same
    arguments always give identical tensors (a private ``torch.Generator``; the global RNG is
    neither used nor disturbed).
    """
    if num_images < 0:
        raise ValueError(f"num_images must be >= 0, got {num_images}")
    if image_size < 8:
        raise ValueError(f"image_size must be >= 8, got {image_size}")
    shapes, textures = class_grid(num_classes)
    gen = torch.Generator().manual_seed(seed)
    labels = balanced_labels(num_images, num_classes, gen)
    params = _draw_parameters(labels, textures, shapes, image_size, gen)
    images = torch.empty(num_images, 3, image_size, image_size, dtype=torch.uint8)
    for start in range(0, num_images, _CHUNK):
        chunk = {k: v[start : start + _CHUNK] for k, v in params.items()}
        rendered = _render(chunk, image_size, gen)
        images[start : start + _CHUNK] = rendered.mul_(255.0).round_().to(torch.uint8)
    return images, labels.to(torch.int64)
