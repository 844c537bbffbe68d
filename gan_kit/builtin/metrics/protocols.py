"""The published metric protocols of stylegan2-ada-pytorch (``metrics/metric_main.py``), by their
names: which images are compared, how many, and the metric's constants, on the math of
``gan_kit.builtin.metrics.inception`` (torch-fidelity's, equal to the official formulas).

Names (``N``: the generated count in thousands, ``50k``; a count without ``k`` is images, for
quick checks and tests: ``fid200_full``):

- ``fid<N>k_full``: FID of N generated images against every real image of the data set (no
  x-flips, no ``max_images`` subset) - the figure StyleGAN2-ADA, StyleGAN3 and R3GAN report;
- ``kid<N>k_full``: KID, N generated against up to 1,000,000 reals, 100 subsets of 1,000;
- ``pr<N>k<K>_full``: precision and recall on VGG16 features, N generated against up to
  200,000 reals, neighbourhood K (the paper's 3); ``pr200_3_full`` for a count in images;
- ``is<N>k``: Inception Score of N generated images in 10 splits;
- ``fid<N>k``, ``kid<N>k``, ``pr<N>k<K>``: the legacy forms, against the first N reals of the
  data set with its x-flips as trained (StyleGAN2's and PGGAN's papers).

The reals, their order and the class labels of a conditional G: ``gan_kit.tools.realsets``.
Generated images use no truncation (psi 1) and are seeded: batch ``i`` draws its latents and
labels from ``seed``'s stream (``gan_kit.tools.evaluate.batch_seed``), so a figure is a function
of G_ema's weights and ``seed`` (stylegan2-ada-pytorch draws from the unseeded global RNG).
``num_images`` overrides the generated count only (the real set stays the name's), and the
report line says the count differs from the name's.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

import attrs

from gan_kit import hookimpl, option
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.feature_passes import mean_and_covariance
from gan_kit.builtin.metrics.inception import FID, KID, InceptionScore, PrecisionRecall
from gan_kit.tools.realsets import RealRule

__all__ = ["ProtocolSpec", "parse_protocol", "FIDProtocol", "KIDProtocol", "PRProtocol", "ISProtocol"]

_COUNT = r"(?P<count>\d+)(?P<k>k?)"
_PATTERNS = {
    "fid": re.compile(rf"^fid{_COUNT}(?P<full>_full)?$"),
    "kid": re.compile(rf"^kid{_COUNT}(?P<full>_full)?$"),
    "is": re.compile(rf"^is{_COUNT}$"),
    "pr": re.compile(r"^pr(?P<count>\d+)(?:(?P<k>k)(?P<nk>\d+)|_(?P<nn>\d+))(?P<full>_full)?$"),
}
#: metric_main's caps on the reals of the *_full protocols (None: all).
MAX_REAL_FULL = {"fid": None, "kid": 1_000_000, "pr": 200_000, "is": None}
#: The most generated images a protocol computes (its name's count, or num_images).
MAX_COUNT = 2**24
#: kid's subsets and images per subset, is's splits (metric_main).
KID_SUBSETS, KID_SUBSET_SIZE, IS_SPLITS = 100, 1000, 10


@attrs.frozen
class ProtocolSpec:
    """One protocol name read: ``family`` (fid, kid, pr, is), ``count`` generated images,
    ``full`` (every real, no x-flips) or legacy (the first ``count`` reals, x-flips as trained),
    and pr's ``neighborhood``."""

    name: str
    family: str
    count: int
    full: bool
    neighborhood: int = 3

    @property
    def real_rule(self) -> RealRule:
        """The reals metric_main compares against (``gan_kit.tools.realsets``)."""
        if self.full or self.family == "is":
            return RealRule(MAX_REAL_FULL[self.family], keep_xflip=False)
        return RealRule(self.count, keep_xflip=True)


def parse_protocol(name: str, family: str | None = None) -> ProtocolSpec | None:
    """The protocol ``name`` (``fid50k_full``, ``pr50k3_full``, ``is10k``, ``fid200_full``) read, or
    None when it is not one (of ``family``, when given). A count of 0 is not one."""
    for fam, pattern in _PATTERNS.items():
        if family is not None and fam != family:
            continue
        m = pattern.match(name)
        if m is None:
            continue
        count = int(m["count"]) * (1000 if m["k"] else 1)
        if count < 1:
            return None
        nhood = int(m["nk"] or m["nn"]) if fam == "pr" else 3
        if fam == "pr" and nhood < 1:
            return None
        return ProtocolSpec(name, fam, count, bool(m.groupdict().get("full")), nhood)
    return None


_STUB_HELP = ' "stub": a small fixed random network for tests and offline smoke runs (values not comparable).'
_NUM_HELP = ("Generated images; None = the count in the name (50,000 for fid50k_full). A smaller count, for quick "
             "checks and tests, changes the generated set only (the reals stay the name's), and the report says so.")
_SEED_HELP = "Seed of the generated images' latents, class labels and noise (and of kid's subsets)."


@attrs.frozen
class ProtocolOptions(FID.Options):
    """What every protocol takes beyond FID's options: the generated count (None: the name's) and
    the seed of the generated set."""

    num_images: int | None = option(None, min=2, max=2**24, help=_NUM_HELP)
    seed: int = option(0, help=_SEED_HELP, min=0, max=2**32 - 1, max_exclusive=True)


class Protocol:
    """What every protocol adds to its metric: the name read (``spec``), the reals (``real_rule``),
    the generated count, ``describe()`` for report lines and the reference-statistics metadata."""

    family: ClassVar[str] = ""
    spec: ClassVar[ProtocolSpec | None] = None

    @classmethod
    def for_name(cls, name: str):
        """The metric class of protocol ``name`` of this family, or None (the registry's family
        lookup, ``gan_kit.plugin_api.registry.is_family``)."""
        spec = parse_protocol(name, cls.family)
        if spec is None:
            return None
        fams = (f"{name}_precision", f"{name}_recall") if spec.family == "pr" else (name,)
        return type(cls.__name__, (cls,), {"spec": spec, "metric_name": name, "families": fams,
                                           "__doc__": cls.__doc__, "__module__": cls.__module__})

    def __init__(self, options=None, context=None):
        if self.spec is None:  # the family's own name, as docs list it
            from gan_kit.base.errors import GankitError

            raise GankitError(f"metric {type(self).__name__}: name one protocol of the family, e.g. fid50k_full, "
                              f"kid50k_full, pr50k3_full, is50k or fid10k_full")
        from gan_kit.base.errors import GankitError

        if self.spec.count > MAX_COUNT:  # the cap num_images has applies to the name's count too
            raise GankitError(f"metric {self.spec.name}: {self.spec.count:,} generated images is more than the "
                              f"{MAX_COUNT:,} (2^24) a protocol computes; use a smaller count, e.g. "
                              f"{self.spec.family}50k{'3' if self.spec.family == 'pr' else ''}"
                              f"{'_full' if self.spec.full else ''}")
        super().__init__(options, context)

    @property
    def real_rule(self) -> RealRule:
        return self.spec.real_rule

    @property
    def num_images(self) -> int:
        return self.options.num_images or self.spec.count

    @property
    def min_images(self) -> int:  # the real count of a protocol is its data set's, never capped
        return 2

    def describe(self) -> dict[str, Any]:
        """``{"protocol", "backbone", "weights", "resize", "generated", "protocol_count"}``: what a
        report line prints beside the value (``weights``: the backbone's file name, or "no weights
        file"; ``resize``: the mode the features are computed with, the backbone's default when the metric
        names none)."""
        o = self.options
        path = fx.weights_path(o.feature_extractor, o.weights)
        return {"protocol": self.spec.name, "backbone": o.feature_extractor,
                "weights": path.name if path is not None else "no weights file",
                "resize": fx.resize_mode(o.feature_extractor, o.resize),
                "generated": self.num_images, "protocol_count": self.spec.count}

    def _key(self, suffix: str = "") -> str:
        return f"Metrics/{self.spec.name}{suffix}"


class FIDProtocol(Protocol, FID):
    """A published FID protocol (fid<N>k_full: N generated vs every real; fid<N>k: vs the first N reals, x-flips as trained); lower is better."""

    family = "fid"
    Options = ProtocolOptions

    def from_features(self, fake, real, device):
        return {self._key(): super().from_features(fake, real, device)["Metrics/fid"]}

    # --------------------------------------------------------------- reference statistics --

    def feature_dim(self, device) -> int:
        """The backbone's feature dimension (one blank image through it)."""
        import torch

        return int(self.extractor(device).extract(torch.zeros(1, 3, 32, 32, dtype=torch.uint8))["pool"].shape[1])

    def reference_meta(self, device) -> dict[str, Any]:
        """What a statistics file for this metric records and is checked against
        (``gan_kit.tools.refstats``): backbone, weights file and digests (of its bytes, and of its
        tensors: ``fx.weights_state_digest``), dim, real-set rule, resize,
        and ``input_size``, the side the backbone resizes every image to."""
        o = self.options
        path = fx.weights_path(o.feature_extractor, o.weights)
        return {"backbone": o.feature_extractor, "weights_file": path.name if path is not None else None,
                "weights_sha256": fx.weights_digest(path) if path is not None else None,
                "weights_tensors_sha256": fx.weights_state_digest(path) if path is not None else None,
                "dim": self.feature_dim(device), "protocol": self.spec.name, "reals": self.real_rule.text(),
                "resize": fx.resize_mode(o.feature_extractor, o.resize),
                "input_size": fx.backbone(o.feature_extractor).input_size}

    def statistics(self, images, device, real: bool) -> tuple[Any, Any, int]:
        """``(mu [D], sigma [D, D], count)`` (float64 numpy; unbiased covariance as ``np.cov``) of an
        image set (``ImageBatches``, this process's share: one process)."""
        feats = self.features(images, device, real=real)
        if "sum" not in feats:  # a pass kept for kid / precision-recall: pool features only
            pool = feats["pool"].double()
            feats = {"count": pool.shape[0], "sum": pool.sum(dim=0), "outer": pool.T @ pool}
        mu, sigma = mean_and_covariance(feats)
        return mu.numpy(), sigma.numpy(), int(feats["count"])

    def compute_against(self, fakes, stats, device) -> dict[str, float]:
        """FID of the generated set (``ImageBatches``) against reference statistics ``stats``
        (``gan_kit.tools.refstats.RefStats``), torch-fidelity's Frechet distance."""
        from torch_fidelity.metric_fid import fid_statistics_to_metric

        mu, sigma, _ = self.statistics(fakes, device, real=False)
        value = fid_statistics_to_metric({"mu": mu, "sigma": sigma}, {"mu": stats.mu, "sigma": stats.sigma},
                                         verbose=False)
        return {self._key(): float(value["frechet_inception_distance"])}


class KIDProtocol(Protocol, KID):
    """A published KID protocol (kid<N>k_full: N generated vs up to 1,000,000 reals, 100 subsets of 1,000; kid<N>k: vs the first N reals); lower is better."""

    family = "kid"
    Options = ProtocolOptions

    @property
    def subsets(self) -> int:
        return KID_SUBSETS

    @property
    def subset_size(self) -> int:
        return KID_SUBSET_SIZE

    def from_features(self, fake, real, device):
        from torch_fidelity.metric_kid import kid_features_to_metric

        size = min(self.subset_size, fake["pool"].shape[0], real["pool"].shape[0])
        res = kid_features_to_metric(fake["pool"], real["pool"], kid_subsets=self.subsets, kid_subset_size=size,
                                     kid_kernel="poly", kid_kernel_poly_degree=3, kid_kernel_poly_gamma=None,
                                     kid_kernel_poly_coef0=1, rng_seed=self.options.seed, verbose=False)
        return {self._key(): float(res["kernel_inception_distance_mean"]),
                self._key("/std"): float(res["kernel_inception_distance_std"])}


class PRProtocol(Protocol, PrecisionRecall):
    """A published precision/recall protocol (pr<N>k<K>_full: N generated vs up to 200,000 reals on VGG16 features, neighbourhood K; pr<N>k<K>: vs the first N reals); higher is better."""

    family = "pr"

    @attrs.frozen
    class Options(ProtocolOptions):
        feature_extractor: Literal["vgg16", "stub"] = option(
            "vgg16", help="torch-fidelity's VGG16 fc2 features (4096-d, after ReLU), as metric_main's vgg16.pt." + _STUB_HELP)
        row_batch_size: int = option(10000, help="Points per block of the pairwise distance computation (memory: "
                                                 "row_batch_size x num_images distances).", min=1, max=2**20)

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        from gan_kit.base.errors import GankitError

        k = self.neighborhood
        if self.num_images <= k:  # refused before any feature is computed (the reals: gankit eval's check)
            raise GankitError(f"metric {self.spec.name}: neighbourhood {k} needs more than {k} images of each set, "
                              f"and {self.num_images:,} are generated; use a neighbourhood below the count "
                              f"(pr{self.spec.count}_3{'_full' if self.spec.full else ''}) or more images")

    @property
    def neighborhood(self) -> int:
        return self.spec.neighborhood

    @classmethod
    def problems(cls, options, recipe):  # the neighbourhood is the name's, checked on the features
        return super(PrecisionRecall, cls).problems(options, recipe)

    def from_features(self, fake, real, device):
        from torch_fidelity.metric_prc import prc_features_to_metric

        from gan_kit.base.errors import GankitError

        k = self.neighborhood
        if min(fake["pool"].shape[0], real["pool"].shape[0]) <= k:
            raise GankitError(f"{self.spec.name}: neighbourhood {k} needs more than {k} images of each set, got "
                              f"{min(fake['pool'].shape[0], real['pool'].shape[0])}")
        res = prc_features_to_metric(fake["pool"].to(device), real["pool"].to(device), prc_neighborhood=k,
                                     prc_batch_size=self.options.row_batch_size, save_cpu_ram=True, verbose=False)
        return {self._key("_precision"): float(res["precision"]), self._key("_recall"): float(res["recall"])}


class ISProtocol(Protocol, InceptionScore):
    """A published Inception Score protocol (is<N>k: N generated images in 10 splits, in order); higher is better."""

    family = "is"

    @attrs.frozen
    class Options(ProtocolOptions):
        feature_extractor: Literal["inception-v3-compat", "stub"] = option(
            "inception-v3-compat", help="torch-fidelity's InceptionV3; the score reads its 1008 logits without the "
                                        "output bias (metric_main's no_output_bias)." + _STUB_HELP)

    @property
    def splits(self) -> int:
        return IS_SPLITS

    @classmethod
    def problems(cls, options, recipe):  # the splits are the protocol's, checked on the features
        return super(InceptionScore, cls).problems(options, recipe)

    def from_features(self, fake, real, device):
        from torch_fidelity.metric_isc import isc_features_to_metric

        from gan_kit.base.errors import GankitError

        if fake["logits"].shape[0] < self.splits:
            raise GankitError(f"{self.spec.name}: {self.splits} splits need at least that many images, got "
                              f"{fake['logits'].shape[0]}")
        # metric_main splits the generated images in order (no shuffle).
        res = isc_features_to_metric(fake["logits"], splits=self.splits, shuffle=False, rng_seed=self.options.seed)
        return {self._key(): float(res["inception_score_mean"]), self._key("/std"): float(res["inception_score_std"])}


@hookimpl
def register_metrics(register):
    register("fid<N>k[_full]", FIDProtocol)
    register("kid<N>k[_full]", KIDProtocol)
    register("pr<N>k<K>[_full]", PRProtocol)
    register("is<N>k", ISProtocol)
