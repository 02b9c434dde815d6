"""A child process for the crash test: appends rounds to a memory forever, one add call at a
time, and prints each round key once its add call has returned."""

import sys
from pathlib import Path

from llama_index_vmem import VMemIndex
from llama_index_vmem.encoders import SiglipImageEncoder


def main(store: str, siglip_dir: str, photo_dir: str) -> None:
    photos = sorted(Path(photo_dir).glob("*.png"))
    index = VMemIndex.from_defaults(path=store, memory_id="crash",
                                    image_encoder=SiglipImageEncoder(model_name=siglip_dir, local_files_only=True))
    taken = {r.round.metadata["round_key"] for r in index.rounds(limit=10**6)}
    n = len(taken)
    print("ready", flush=True)
    while True:
        n += 1
        key = f"S:{n}"
        if key in taken:
            continue
        photo = photos[n % len(photos)]
        index.add_rounds([{
            "round_key": key, "session_id": "S",
            "user": f"Round {n}: here is {photo.stem} and a long note " + "about the weather " * (n % 7),
            "assistant": f"Nice {photo.stem} number {n}.",
            "images": [{"image_id": f"S:IMG_{n}", "path": str(photo), "caption": f"a photo of {photo.stem}"}],
        }])
        print(key, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
