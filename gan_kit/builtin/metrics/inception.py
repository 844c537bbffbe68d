"""The metrics StyleGAN2-ADA and StudioGAN users report, on deep features of G_ema's images and
of the real images (``gan_kit.builtin.metrics.feature_extractors``), through torch-fidelity's math:

- ``fid``: Frechet Inception distance (Heusel et al. 2017), ``Metrics/fid``; lower is better.
- ``kid``: kernel Inception distance (Binkowski et al. 2018), ``Metrics/kid`` (and ``/std``);
  lower is better.
- ``precision-recall``: improved precision and recall (Kynkaanniemi et al. 2019),
  ``Metrics/precision`` and ``Metrics/recall`` in [0, 1]; higher is better.
- ``is``: Inception Score (Salimans et al. 2016), ``Metrics/is`` (and ``/std``); higher is better.

Each compares ``num_images`` generated images with as many real ones drawn with the metric's
``seed`` (``is`` reads only the generated ones). Values depend on the image count (FID and KID
fall, precision and recall rise, as it grows): compare figures computed with the same count.

Streamed (``compute_streamed``): both sets go through the extractor batch by batch, every process
its share, into accumulators (``gan_kit.builtin.metrics.feature_passes``: float64 sums for fid, features
for kid and precision-recall, logits for is) - never an image set held whole, so host memory does
not grow with ``num_images`` for fid; rank 0 combines the shares and returns the values.
"""

from __future__ import annotations

import math
import weakref
from pathlib import Path
from typing import ClassVar, Literal

import attrs

from gan_kit import ImageBatches, hookimpl, option
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.feature_passes import mean_and_covariance, reduce_features
from gan_kit.builtin.metrics import FromOptions
from gan_kit.base.errors import GankitError

_NUM_HELP = ("Images from G_ema and from the data (capped at the data's size); figures depend on it, so "
             "compare runs at one count (StyleGAN2-ADA reports 50k).")
_WEIGHTS_HELP = ("Local weights file of the feature extractor (relative to the recipe file that sets it); None = "
                 "torch-fidelity's file in the torch hub cache ($TORCH_HOME/hub/checkpoints). Nothing is ever "
                 "downloaded.")
_CACHE_HELP = ("Keep the real images' features on disk (under $GANKIT_CACHE_DIR/metrics, else "
               "~/.cache/gankit/metrics), keyed by the exact images and the extractor (its weights file's content, "
               "preprocessing and version), so later runs and gankit eval skip them.")
#: The feature metrics alive in this process (those of the run or evaluation at hand).
_LIVE: "weakref.WeakSet[FeatureMetric]" = weakref.WeakSet()
_STUB = ' "stub": a small fixed random network for tests and offline smoke runs (values not comparable).'
_BACKBONES = (" Any backbone (gankit list-plugins --kind backbone): clip-vit-b-32 (CLIP-FID), dinov2-vit-l-14 "
              "(FD_DINOv2), vgg16, or a plugin's.")
_RESIZE_HELP = ("How the uint8 images reach the backbone's input size (clean-fid's names): clean (PIL bicubic on "
                "float), legacy_tensorflow (the network's own TF1-style bilinear resize: torch-fidelity's InceptionV3 "
                "and VGG16 only), legacy_pytorch (torch bilinear), pil_uint8 (PIL bicubic on uint8: dgm-eval's "
                "DINOv2), pil_uint8_crop (shorter side, centre crop: clean-fid's CLIP). None = the backbone's "
                "default (legacy_tensorflow for inception-v3-compat and vgg16). Values differ between modes.")
_RESIZE = Literal["clean", "legacy_tensorflow", "legacy_pytorch", "pil_uint8", "pil_uint8_crop"]


class FeatureMetric(FromOptions):
    """Shared by fid, kid, precision-recall and is: the features of both image sets from the
    process's extractor, through the caches, then ``from_features``."""

    metric_name: ClassVar[str] = ""
    #: Whether the real images' features are needed (``is`` reads only G_ema's).
    needs_real: ClassVar[bool] = True
    #: The ``Metrics/<family>`` keys this metric writes (reports read its direction from here).
    families: ClassVar[tuple[str, ...]] = ()
    #: Needs the extractor's logits (``is``).
    needs_logits: ClassVar[bool] = False
    #: What its passes keep (``gan_kit.builtin.metrics.feature_passes``): ``stats``, ``pool``, ``logits``.
    keeps: ClassVar[frozenset[str]] = frozenset({"pool"})
    #: Reads its image sets batch by batch on every process (``compute_streamed``).
    streamed: ClassVar[bool] = True

    @attrs.frozen
    class Options:
        num_images: int = option(10000, min=2, max=2**20, help=_NUM_HELP)
        seed: int = option(0, help="Seed of the latents and the real-image choice.",
                           min=0, max=2**32 - 1, max_exclusive=True)
        feature_extractor: str = option(
            "inception-v3-compat",
            help="The backbone: torch-fidelity's InceptionV3 (the TF FID network, 2048-d pool3 features)." + _STUB
                 + _BACKBONES)
        weights: str | None = option(None, help=_WEIGHTS_HELP, path=True)
        resize: _RESIZE | None = option(None, help=_RESIZE_HELP)
        batch_size: int = option(64, help="Images per feature extractor pass.", min=1, max=2**16)
        cache: bool = option(True, help=_CACHE_HELP)

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        msg = self._backbone_problem(self.options)
        if msg:
            raise GankitError(msg[1])
        msg = fx.extractor_problem(self.metric_name, self.options.feature_extractor, self.options.weights)
        if msg:
            raise GankitError(msg)
        channels = int(getattr(self.context, "channels", 0) or 0)
        if channels not in (0, 1, 3):  # 0: built without a data set (gankit eval reads it later)
            raise GankitError(f"{self.metric_name}: the Inception network takes RGB or grey images, and the data set's "
                              f"have {channels} channels (data.alpha = \"keep\" gives RGBA); set data.alpha = "
                              f"\"composite\" for this metric, or measure with swd, which takes any channels")
        _LIVE.add(self)

    def keep(self) -> frozenset[str]:
        """What a pass on this metric's extractor keeps: what every live metric on the same
        extractor needs, so the metrics of one tick share one pass over G_ema's images (fid alone
        keeps only its float64 sums, whatever the number of images)."""
        mine = self.options.feature_extractor
        return frozenset().union(*(m.keeps for m in list(_LIVE) if m.options.feature_extractor == mine))

    @classmethod
    def _backbone_problem(cls, options) -> tuple[str, str] | None:
        """``(key, line)`` when the backbone is unknown, lacks the logits ``is`` needs, or does
        not take the resize mode; else None."""
        try:
            b = fx.backbone(options.feature_extractor)
            fx.resize_mode(options.feature_extractor, options.resize)
        except GankitError as e:
            key = "resize" if str(e).startswith("resize") else "feature_extractor"
            return key, f"{cls.metric_name}: {e}"
        if cls.needs_logits and not b.logits_dim:
            return "feature_extractor", (f"{cls.metric_name}: the {options.feature_extractor} backbone has no logits, "
                                         f"which the score reads; use inception-v3-compat")
        return None

    @classmethod
    def problems(cls, options, recipe):
        bad = cls._backbone_problem(options)
        if bad:
            return [bad]
        if recipe is not None and not Path(recipe.path).is_file():
            return []  # a recipe read back from a checkpoint: checked when the metric is built
        msg = fx.extractor_problem(cls.metric_name, options.feature_extractor, options.weights)
        return [("weights" if options.weights else "name", msg)] if msg else []

    def extractor(self, device) -> fx.FeatureExtractor:
        """The process's extractor of this metric's backbone and resize mode (loaded once)."""
        return fx.get_extractor(self.options.feature_extractor, self.options.weights, device, self.metric_name,
                                self.options.resize)

    def _tag(self) -> str:
        recipe = getattr(self.context, "recipe", None)
        return getattr(getattr(recipe, "data", None), "name", "") or ""

    def features(self, images: ImageBatches, device, real: bool) -> dict:
        """This process's features of its share of ``images`` (``[N,C,H,W]`` in [-1, 1] batch by
        batch, quantised to uint8 as saved PNGs would be), holding what ``keep()`` names; from
        the caches when the same set went through this extractor before."""
        disk = fx.feature_cache_dir() if (real and self.options.cache) else None
        return fx.stream_features(self.extractor(device), images, self.keep(), real, disk, self._tag())

    def compute(self, generate, reals, device):
        """The metric of two image tensors held whole (``generate(n)`` and ``reals``)."""
        n = min(self.options.num_images, reals.shape[0])
        bs = self.options.batch_size
        fake = self.features(ImageBatches.of_tensor(generate(n), bs), device, real=False)
        real = self.features(ImageBatches.of_tensor(reals[:n], bs), device, real=True) if self.needs_real else None
        return self.from_features(fake, real, device)

    def compute_streamed(self, fakes: ImageBatches, reals: ImageBatches, device) -> dict[str, float]:
        """The metric of two image sets read batch by batch, each process its share: the shares'
        features are combined on rank 0, which returns the values (the other processes ``{}``).
        A collective: every process calls it."""
        fake = reduce_features(self.features(fakes, device, real=False), fakes.world_size, fakes.size)
        real = (reduce_features(self.features(reals, device, real=True), reals.world_size, reals.size)
                if self.needs_real else None)
        if fake is None:
            return {}
        return self.from_features(fake, real, device)

    def from_features(self, fake: dict, real: dict | None,
                      device) -> dict[str, float]:
        raise NotImplementedError


class FID(FeatureMetric):
    """Frechet Inception distance (Heusel et al. 2017) via torch-fidelity; lower is better."""

    metric_name = "fid"
    families = ("fid",)
    value_range = (0.0, math.inf)  # a squared Frechet distance
    keeps = frozenset({"stats"})

    def from_features(self, fake, real, device):
        """From each set's float64 sums (``stats``) or, given only ``pool`` features, from those;
        torch-fidelity's Frechet distance of the two Gaussians."""
        from torch_fidelity.metric_fid import fid_statistics_to_metric

        value = fid_statistics_to_metric(_gaussian(fake), _gaussian(real), verbose=False)
        return {"Metrics/fid": float(value["frechet_inception_distance"])}


def _gaussian(feats: dict) -> dict:
    """``{"mu", "sigma"}`` (float64 numpy) of a set: from its sums, else from its pool features."""
    if "sum" not in feats:
        pool = feats["pool"].double()
        feats = {"count": pool.shape[0], "sum": pool.sum(dim=0), "outer": pool.T @ pool}
    mu, sigma = mean_and_covariance(feats)
    return {"mu": mu.numpy(), "sigma": sigma.numpy()}


class KID(FeatureMetric):
    """Kernel Inception distance (Binkowski et al. 2018; unbiased MMD^2, cubic polynomial kernel) via torch-fidelity; lower is better."""

    metric_name = "kid"
    families = ("kid",)

    @attrs.frozen
    class Options(FeatureMetric.Options):
        subsets: int = option(100, help="Random subsets the unbiased MMD^2 is averaged over.", min=1, max=2**16)
        subset_size: int = option(1000, help="Images per subset (capped at the number of images); the unbiased "
                                             "MMD^2 needs 2.", min=2, max=2**20)

    def from_features(self, fake, real, device):
        from torch_fidelity.metric_kid import kid_features_to_metric

        size = min(self.options.subset_size, fake["pool"].shape[0], real["pool"].shape[0])
        res = kid_features_to_metric(fake["pool"], real["pool"], kid_subsets=self.options.subsets,
                                     kid_subset_size=size, kid_kernel="poly", kid_kernel_poly_degree=3,
                                     kid_kernel_poly_gamma=None, kid_kernel_poly_coef0=1,
                                     rng_seed=self.options.seed, verbose=False)
        return {"Metrics/kid": float(res["kernel_inception_distance_mean"]),
                "Metrics/kid/std": float(res["kernel_inception_distance_std"])}


class PrecisionRecall(FeatureMetric):
    """Improved precision and recall (Kynkaanniemi et al. 2019; k-NN balls on VGG16 features) via torch-fidelity; higher is better."""

    metric_name = "precision-recall"
    families = ("precision", "recall")
    higher_is_better = True
    value_range = (0.0, 1.0)  # shares of images
    min_images = 4

    @attrs.frozen
    class Options(FeatureMetric.Options):
        feature_extractor: str = option(
            "vgg16", help="The backbone. vgg16: torch-fidelity's VGG16 fc2 features (4096-d, after ReLU), as the "
                          "paper, stylegan2-ada-pytorch and torch-fidelity use; inception-v3-compat: the 2048-d pool "
                          "features fid uses (one pass serves both)." + _STUB + _BACKBONES)
        neighborhood: int = option(3, help="k: each point's ball reaches its k-th nearest neighbour in its own set "
                                           "(the paper's 3).", min=1, max=2**10)
        row_batch_size: int = option(10000, help="Points per block of the pairwise distance computation (memory: "
                                                 "row_batch_size x num_images distances).", min=1, max=2**20)

    @classmethod
    def problems(cls, options, recipe):
        if options.neighborhood >= options.num_images:
            return [("neighborhood", f"neighborhood = {options.neighborhood} needs more than that many images; "
                                     f"num_images is {options.num_images}")]
        return super().problems(options, recipe)

    def from_features(self, fake, real, device):
        from torch_fidelity.metric_prc import prc_features_to_metric

        k = self.options.neighborhood
        if min(fake["pool"].shape[0], real["pool"].shape[0]) <= k:
            raise GankitError(f"precision-recall: neighborhood = {k} needs more than {k} images of each set, got "
                              f"{min(fake['pool'].shape[0], real['pool'].shape[0])}")
        res = prc_features_to_metric(fake["pool"].to(device), real["pool"].to(device), prc_neighborhood=k,
                                     prc_batch_size=self.options.row_batch_size, save_cpu_ram=True, verbose=False)
        return {"Metrics/precision": float(res["precision"]), "Metrics/recall": float(res["recall"])}


class InceptionScore(FeatureMetric):
    """Inception Score (Salimans et al. 2016; exp of the mean KL divergence of p(y|x) from p(y), over splits) via torch-fidelity; higher is better."""

    metric_name = "is"
    families = ("is",)
    value_range = (1.0, math.inf)  # exp of a mean KL divergence, which is >= 0
    needs_real = False
    needs_logits = True
    keeps = frozenset({"logits"})
    higher_is_better = True

    @attrs.frozen
    class Options(FeatureMetric.Options):
        feature_extractor: str = option(
            "inception-v3-compat", help="The backbone, one with logits: torch-fidelity's InceptionV3; the score reads "
                                        "its 1008 logits (the unbiased ones, as torch-fidelity)." + _STUB)
        splits: int = option(10, help="The generated images are split into this many parts; the score is their "
                                      "mean (Metrics/is) and standard deviation (Metrics/is/std), as the paper's 10.",
                             min=1, max=2**10)

    @classmethod
    def problems(cls, options, recipe):
        if options.splits > options.num_images:
            return [("splits", f"splits = {options.splits} needs at least as many images; num_images is "
                               f"{options.num_images}")]
        return super().problems(options, recipe)

    def from_features(self, fake, real, device):
        from torch_fidelity.metric_isc import isc_features_to_metric

        if fake["logits"].shape[0] < self.options.splits:
            raise GankitError(f"is: splits = {self.options.splits} needs at least that many images, got "
                              f"{fake['logits'].shape[0]}")
        res = isc_features_to_metric(fake["logits"], splits=self.options.splits, shuffle=True,
                                     rng_seed=self.options.seed)
        return {"Metrics/is": float(res["inception_score_mean"]), "Metrics/is/std": float(res["inception_score_std"])}


@hookimpl
def register_metrics(register):
    register("fid", FID)
    register("kid", KID)
    register("precision-recall", PrecisionRecall)
    register("is", InceptionScore)
