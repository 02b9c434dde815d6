"""Offline demo: store a small multimodal conversation with real photos, ask one question per case.

Run ``python -m llama_index_vmem.demo``. Embedded Qdrant Edge store, MiniLM and EfficientNet from
installed packages, photos bundled with scikit-image; no network, no LLM (anchors fall back to the
raw query, and the output says so). Pass ``--path DIR`` to keep the memory on disk.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import List, Optional

from llama_index.core.schema import ImageNode
from PIL import Image

from . import VMemIndex, VMemQueryBundle
from .postprocessor import NeighborRoundPostprocessor


def photos_dir() -> Path:
    """The sample photos scikit-image installs with itself (real photos, no download)."""
    import skimage

    return Path(skimage.__file__).parent / "data"


def conversation(photos: Path) -> List[dict]:
    """Two sessions of a user sharing photos; the answers sit in the text next to the photos."""
    img = lambda i, name, caption: {"image_id": i, "path": str(photos / name), "caption": caption}  # noqa: E731
    s1, s2 = dict(session_id="D1", timestamp="2024-06-17"), dict(session_id="D2", timestamp="2024-07-02")
    return [
        dict(s1, user="I adopted a cat last week!", assistant="Congratulations! What is her name?"),
        dict(s1, user="Here she is on the sofa.", assistant="Adorable tabby! Those stripes are lovely.",
             images=[img("D1:IMG_001", "chelsea.png", "a tabby cat lying down, looking to the side")]),
        dict(s1, user="Her name is Mochi, she came from the Riverside shelter.", assistant="Mochi is a perfect name."),
        dict(s1, user="I also started a coffee habit.", assistant="Careful with the caffeine!",
             images=[img("D1:IMG_002", "coffee.png", "a cup of coffee with latte art on a saucer")]),
        dict(s1, user="The cafe is Blue Fern Roasters on 5th street.", assistant="I have heard their flat white is great."),
        dict(s2, user="We drove to the coast to watch a launch.", assistant="Exciting! Which rocket was it?",
             images=[img("D2:IMG_001", "rocket.jpg", "a rocket on a launch pad under a clear sky")]),
        dict(s2, user="A small satellite launch by a private company.", assistant="Those are getting common now."),
        dict(s2, user="Then I went riding at my aunt's ranch.", assistant="Nice, what is the horse called?",
             images=[img("D2:IMG_002", "horse.png", "a horse silhouette on white")]),
        dict(s2, user="His name is Thunder, he is twelve years old.", assistant="Thunder sounds like a fast horse."),
        dict(s2, user="Any tips for learning Portuguese?", assistant="Try 20 minutes of spaced repetition daily."),
    ]


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", help="memory directory (default: a temporary one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    photos = photos_dir()
    with tempfile.TemporaryDirectory(prefix="vmem-demo-") as work, VMemIndex.from_defaults(path=args.path) as index:
        crop = Path(work) / "cat-crop.png"
        with Image.open(photos / "chelsea.png") as im:
            im.crop((0, 0, im.width * 3 // 4, im.height)).save(crop)
        if len(index) == 0:
            index.add_rounds(conversation(photos))
        print(f"memory holds {len(index)} rounds\n")
        retriever = index.as_retriever(k=4)
        neighbours = NeighborRoundPostprocessor(index)
        questions = [
            VMemQueryBundle("What is the name of the cafe I go to?"),
            VMemQueryBundle("Which photo shows the rocket launch?"),
            VMemQueryBundle("What is this animal's name?", image_path=str(crop)),
            VMemQueryBundle("Which picture in our chat is this?", image_path=str(crop)),
        ]
        for q in questions:
            result = retriever.retrieve_with_plan(q)
            attached = f"  [+ image {Path(q.image_path).name}]" if q.image_path else ""
            print(f"Q: {q.query_str}{attached}")
            print(f"   route:   {result.plan.case.value}  signals: {', '.join(s.name for s in result.plan.signals)}")
            for anchor, value in result.anchors.items():
                print(f"   anchor:  {anchor.value} = {value.text[:60]!r} ({value.source})")
            for n in result.nodes:
                if isinstance(n.node, ImageNode):
                    print(f"            image {n.node.metadata['image_id']} ({n.node.metadata['vmem']['match']})  {n.node.image_path}")
                else:
                    ranks = n.node.metadata["vmem"]["ranks"]
                    print(f"   round {n.node.metadata['round_key']:6} score {n.score:.4f} ranks {ranks}")
            blocks = neighbours.postprocess_nodes(result.nodes, q)
            print(f"   context: {len(blocks) - sum(isinstance(b.node, ImageNode) for b in blocks)} block(s): "
                  + "; ".join("+".join(b.node.metadata['rounds']) for b in blocks if not isinstance(b.node, ImageNode)))
            print()


if __name__ == "__main__":
    main()
