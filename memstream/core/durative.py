"""Durative memory (TSM): a month's facts clustered into topics.

GaussianMixture with diagonal covariance (full covariance on a few hundred 384-d vectors picks
k = 1 and takes seconds), k chosen by BIC, fixed seed: the same facts always give the same
clusters. The embeddings are first projected on their top principal components: in 384
dimensions BIC's penalty (2 x 384 parameters per component) outweighs any fit a month of facts
can show, and it would always choose one topic.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from sklearn.decomposition import PCA
from sklearn.mixture import GaussianMixture

MAX_TOPICS = 5
MIN_PER_TOPIC = 3  # fewer facts than this per component is not a topic
COMPONENTS = 8  # principal components kept before clustering


def cluster(vectors: npt.NDArray[np.float32], max_k: int = MAX_TOPICS, seed: int = 0) -> list[int]:
    """A cluster label per vector; labels are renumbered by first appearance (0, 1, ...)."""
    n = len(vectors)
    if n < 2 * MIN_PER_TOPIC:
        return [0] * n
    x = PCA(min(COMPONENTS, n - 1), svd_solver="full").fit_transform(vectors)
    best_labels: npt.NDArray[np.int64] | None = None
    best_bic = np.inf
    for k in range(1, min(max_k, n // MIN_PER_TOPIC) + 1):
        gmm = GaussianMixture(k, covariance_type="diag", random_state=seed, reg_covar=1e-4).fit(x)
        bic = gmm.bic(x)
        if bic < best_bic:
            best_bic, best_labels = bic, gmm.predict(x)
    assert best_labels is not None
    order: dict[int, int] = {}
    return [order.setdefault(int(label), len(order)) for label in best_labels]
