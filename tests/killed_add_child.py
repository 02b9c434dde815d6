"""A child process for the crash test: stores one round with a picture, then dies (``os._exit``,
which runs no cleanup) at a chosen point of a second add with another picture."""

import os
import sys

from llama_index_vmem import VMemIndex
from llama_index_vmem import images as image_io
from llama_index_vmem.encoders import SiglipImageEncoder
from llama_index_vmem.store import Collection


def main(store: str, siglip_dir: str, kept_photo: str, lost_photo: str, die: str) -> None:
    index = VMemIndex.from_defaults(path=store, memory_id="crash",
                                    image_encoder=SiglipImageEncoder(model_name=siglip_dir, local_files_only=True))
    index.add_round(user="the first picture", images=[{"image_id": "kept", "path": kept_photo}], round_key="R1")
    save, upsert = image_io.save, type(index.store).upsert

    def save_then_die(*args, **kwargs):
        save(*args, **kwargs)
        os._exit(9)

    def die_before_rounds(store, collection, points):
        if collection is Collection.ROUNDS:
            os._exit(9)
        return upsert(store, collection, points)

    if die == "after_picture_saved":
        image_io.save = save_then_die
    else:
        type(index.store).upsert = die_before_rounds
    index.add_round(user="the second picture", images=[{"image_id": "lost", "path": lost_photo}], round_key="R2")


if __name__ == "__main__":
    main(*sys.argv[1:6])
