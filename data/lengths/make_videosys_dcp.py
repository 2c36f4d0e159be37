#!/usr/bin/env python3
"""Writes the VideoSys DCP benchmark's length traces (dcp-bench scenario E).

The seed paper's benchmark (VideoSys, examples/training/open_sora, its
DummyVariableVideoTextDataset) draws Open-Sora STDiT-v3 samples from
resolution buckets 144p, 240p, 360p, 480p, 720p (one aspect ratio, 9:16) x
{1, 51, 102, 204, 408} frames. Half the samples are images (1 frame). Bucket
counts follow a Zipf law with alpha = 3 and offset 5: the k-th bucket
(k = 1..N) gets a share proportional to 1 / (k + 5)^3, rounded, the rounding
error given to the first. Images and videos are drawn separately, each over
its own buckets.

Three mixes, as the bucket order decides which end the Zipf favours:
  short:    buckets shortest first (VideoSys's order: frames x pixels),
  long:     the same buckets longest first,
  balanced: every bucket the same count (VideoSys's "uniform" distribution,
            here exactly rather than drawn).

Tokens of a sample, for STDiT-v3 (Open-Sora 1.2):
  tokens = T' x ceil(floor(H / 8) / 2) x ceil(floor(W / 8) / 2)
with T' = 1 for an image and frames * 5 // 17 for a video: the Open-Sora 1.2
VAE turns every 17 frames into 5 latent frames (VideoSys's loader computes
the latent frame count this way; every bucket's frame count is a multiple of
17, so it is exact), its spatial VAE halves each side three times rounding
down (8x), and STDiT-v3 pads the latent to its 2x2 patch.

Deterministic: the counts are fixed by the law and the lines are shuffled
with a seeded generator. Run from this folder:  python3 make_videosys_dcp.py
"""

import random

RESOLUTIONS = [  # name, height, width (VideoSys's benchmark aspect ratio)
    ("144p", 144, 256),
    ("240p", 240, 426),
    ("360p", 360, 640),
    ("480p", 480, 854),
    ("720p", 720, 1280),
]
FRAMES = [1, 51, 102, 204, 408]
ZIPF_ALPHA = 3.0
ZIPF_OFFSET = 5
IMAGE_FRACTION = 0.5
SAMPLES = 50000
SEED = 25


def tokens(frames, height, width):
    latent_frames = 1 if frames == 1 else frames * 5 // 17
    patches_h = -(-(height // 8) // 2)
    patches_w = -(-(width // 8) // 2)
    return latent_frames * patches_h * patches_w


def zipf_counts(n_buckets, total):
    weights = [1.0 / (k + ZIPF_OFFSET) ** ZIPF_ALPHA
               for k in range(1, n_buckets + 1)]
    scale = total / sum(weights)
    counts = [round(w * scale) for w in weights]
    counts[0] += total - sum(counts)
    return counts


def mix(order):
    images = [(1, h, w) for _, h, w in RESOLUTIONS]
    videos = [(f, h, w) for _, h, w in RESOLUTIONS for f in FRAMES if f > 1]
    # VideoSys sorts buckets by frames x pixels (stable: resolution order
    # breaks ties).
    videos.sort(key=lambda b: b[0] * b[1] * b[2])
    n_images = int(IMAGE_FRACTION * SAMPLES)
    lengths = []
    for buckets, total in ((images, n_images), (videos, SAMPLES - n_images)):
        if order == "long":
            buckets = buckets[::-1]
        if order == "balanced":
            counts = [total // len(buckets)] * len(buckets)
            counts[0] += total - sum(counts)
        else:
            counts = zipf_counts(len(buckets), total)
        for bucket, count in zip(buckets, counts):
            lengths += [tokens(*bucket)] * count
    random.Random(SEED).shuffle(lengths)
    return lengths


def main():
    for order in ("short", "balanced", "long"):
        lengths = mix(order)
        name = f"videosys_dcp_{order}.txt"
        with open(name, "w") as f:
            f.write("".join(f"{n}\n" for n in lengths))
        print(f"{name}: {len(lengths)} samples, mean {sum(lengths) / len(lengths):.0f}"
              f" tokens, max {max(lengths)}")


if __name__ == "__main__":
    main()
