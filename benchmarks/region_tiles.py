"""Region multi-vector image retrieval (DeliverMem R1) on real photos: with and without tiles.

Builds one memory from the captioned photos of Debian's ``tuxpaint-stamps-default`` (installed by
this script with apt-get if missing: ``/usr/share/tuxpaint/stamps/**/X.png`` with the caption in
``X.txt``), one round per photo. Each query is a crop covering a quarter of a stored photo (half its
width and half its height, at a random seeded position), asked as "Which picture in our chat is
this?" (image+text -> image, the visual signal alone). Reports image-lane Hit@1/Hit@5 with and
without tiles, vectors stored per image, build time and query latency.

    python benchmarks/region_tiles.py [--limit 300] [--encoder efficientnet|siglip2]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

from llama_index.core.schema import ImageNode
from PIL import Image
from tqdm.auto import tqdm

from llama_index_vmem import EfficientNetImageEncoder, SiglipImageEncoder, VMemIndex, VMemQueryBundle
from llama_index_vmem.encoders import default_text_embedding
from llama_index_vmem.bench.metrics import percentile

STAMPS = Path("/usr/share/tuxpaint/stamps")
logger = logging.getLogger("region_tiles")


def ensure_stamps() -> None:
    if not STAMPS.is_dir():
        logger.info("installing tuxpaint-stamps-default with apt-get")
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "tuxpaint-stamps-default"], check=True)


def photos(limit: int) -> List[Tuple[Path, str]]:
    """(png, caption) pairs, in a stable order."""
    out = []
    for png in sorted(STAMPS.rglob("*.png")):
        txt = png.with_suffix(".txt")
        if txt.is_file():
            lines = txt.read_text(errors="ignore").strip().splitlines()
            out.append((png, lines[0] if lines else ""))
    return out[:limit]


def quarter_crops(items: List[Tuple[Path, str]], directory: Path, seed: int = 0) -> List[Path]:
    rng = random.Random(seed)
    out = []
    for i, (png, _) in enumerate(items):
        with Image.open(png) as img:
            img = img.convert("RGB")
            w, h = img.size
            x, y = rng.randint(0, w - w // 2), rng.randint(0, h - h // 2)
            path = directory / f"crop{i}.png"
            img.crop((x, y, x + w // 2, y + h // 2)).save(path)
        out.append(path)
    return out


def run(items: List[Tuple[Path, str]], crops: List[Path], tiles: bool, encoder, embed) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        index = VMemIndex.from_defaults(path=tmp, embed_model=embed, image_encoder=encoder, region_tiles=tiles)
        rounds = [{"round_key": f"S:{i}", "session_id": "S", "user": "Sharing a photo.", "assistant": "Thanks!",
                   "images": [{"image_id": f"S:IMG_{i}", "path": str(png), "caption": caption}]}
                  for i, (png, caption) in enumerate(items)]
        start = time.perf_counter()
        for chunk in range(0, len(rounds), 50):
            index.add_rounds(rounds[chunk:chunk + 50])
        build = time.perf_counter() - start
        retriever = index.as_retriever(k=5)
        hits1, hits5, latencies = [], [], []
        for i, crop in enumerate(tqdm(crops, desc=f"tiles={tiles}")):
            start = time.perf_counter()
            result = retriever.retrieve_with_plan(VMemQueryBundle("Which picture in our chat is this?", image_path=str(crop)))
            latencies.append((time.perf_counter() - start) * 1000)
            keys = [n.node.metadata["round_key"] for n in result.nodes if not isinstance(n.node, ImageNode)]
            hits1.append(keys[:1] == [f"S:{i}"])
            hits5.append(f"S:{i}" in keys[:5])
        index.close()
    return {"hit@1": statistics.fmean(hits1), "hit@5": statistics.fmean(hits5), "vectors_per_image": 6 if tiles else 1,
            "build_s": build, "query_ms_p50": percentile(latencies, 50), "query_ms_p95": percentile(latencies, 95)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--encoder", choices=("efficientnet", "siglip2"), default="efficientnet")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    ensure_stamps()
    items = photos(args.limit)
    encoder = EfficientNetImageEncoder() if args.encoder == "efficientnet" else SiglipImageEncoder()
    embed = default_text_embedding()
    with tempfile.TemporaryDirectory() as tmp:
        crops = quarter_crops(items, Path(tmp))
        results = {tiles: run(items, crops, tiles, encoder, embed) for tiles in (False, True)}
    print(f"\n{len(items)} photos, {len(crops)} quarter-crop queries, encoder {args.encoder}\n")
    print("| region tiles | hit@1 | hit@5 | vectors/image | build s | query p50 ms | query p95 ms |")
    print("|---|---|---|---|---|---|---|")
    for tiles, r in results.items():
        print(f"| {'on' if tiles else 'off'} | {r['hit@1']:.3f} | {r['hit@5']:.3f} | {r['vectors_per_image']} | "
              f"{r['build_s']:.1f} | {r['query_ms_p50']:.1f} | {r['query_ms_p95']:.1f} |")


if __name__ == "__main__":
    main()
