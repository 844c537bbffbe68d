"""Feeding real images: the in-memory and on-disk image datasets (optionally labelled, optionally
doubled with mirrored copies), batch collation, a resumable batch sampler whose batch size follows
the growth schedule, and the data loader (one-line errors from its worker processes too).

Dataset contract (every built-in dataset): ``len(ds)`` items; ``ds.num_classes`` (0 when the set
has no labels) and ``ds.labels`` (``int64 [N]`` class indices in ``[0, num_classes)``, or None).
An item is a float image ``[C, H, W]`` in [-1, 1], or ``(image, label)`` with ``label`` a 0-dim
``int64`` tensor when the set is labelled; ``ds.__getitems__(indices)`` fetches a batch in one
indexing operation: ``images [N, C, H, W]``, or ``(images, labels [N])`` when labelled.
A dataset that stores or decodes 8-bit images may also have ``ds.uint8_items(indices)``: the
same batch as ``uint8`` 0..255 (``to_float_images`` gives the float values of ``__getitems__``);
the training loader asks for it so that the float conversion happens on the device.

One job per module: ``datasets`` (the datasets and the collation of their items into batches),
``loader`` (the batch sampler and the training loader), ``digest`` (the content digest of a data
set that lets a resumed run read it from another path); everything is importable from here.
"""

from gan_kit.training.data.datasets import (FileImages, ImageDataset, TensorImages, UInt8Images, XFlip, check_labels,
                                   collate_images, collate_images_labels, has_uint8_batches, mirrored,
                                   to_float_images)
from gan_kit.training.data.digest import data_digest
from gan_kit.training.data.loader import (GankitLoader, PhaseBatchSampler, auto_num_workers, index_at, iter_batches,
                                 make_loader)

__all__ = ["check_labels", "ImageDataset", "TensorImages", "UInt8Images", "FileImages", "XFlip", "mirrored",
           "collate_images", "collate_images_labels", "to_float_images", "has_uint8_batches", "index_at",
           "PhaseBatchSampler", "GankitLoader", "iter_batches", "make_loader", "auto_num_workers", "data_digest"]
