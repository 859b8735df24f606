"""Independent NumPy models of stdlib/nn.tel, stdlib/optim.tel and the TEL samples in samples/.

Each sample function takes the inputs and the parameters of one sample, keyed by their TEL names,
and returns the outputs its `infer` entry point returns (every `out` that does not depend on a
training-only input), keyed by TEL name. All arithmetic is float64, whatever the arrays given.
`SAMPLES` maps each sample's module name to its function.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Arrays = dict[str, np.ndarray]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _f64(x: np.ndarray | float) -> np.ndarray:
    """`x` as a float64 array."""
    return np.asarray(x, dtype=np.float64)


# --- nn ------------------------------------------------------------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function 1 / (1 + e^-x), evaluated without overflow for either sign."""
    x = _f64(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def relu(x: np.ndarray) -> np.ndarray:
    """max(x, 0), elementwise."""
    return np.maximum(_f64(x), 0.0)


def leaky_relu(x: np.ndarray, slope: float = 0.01) -> np.ndarray:
    """x where x > 0, slope * x elsewhere."""
    x = _f64(x)
    return np.where(x > 0, x, slope * x)


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))) (not the tanh approximation)."""
    x = _f64(x)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation (PyTorch's approximate='tanh')."""
    x = _f64(x)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    return _f64(x) * sigmoid(x)


def softmax(x: np.ndarray) -> np.ndarray:
    """exp(x) / sum(exp(x)) over the last axis, shifted by the row maximum."""
    x = _f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    """log(softmax(x)) over the last axis: x - max - log(sum(exp(x - max)))."""
    x = _f64(x)
    s = x - x.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def cross_entropy(probs: np.ndarray, labels: np.ndarray, eps: float = 1e-30) -> np.ndarray:
    """Mean over the rows of -sum(labels * log(max(probs, eps))) along each row (a scalar)."""
    clamped = np.maximum(_f64(probs), eps)
    return _f64(-np.mean(np.sum(_f64(labels) * np.log(clamped), axis=-1)))


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean over the rows of -sum(labels * log_softmax(logits)) along each row (a scalar)."""
    return _f64(-np.mean(np.sum(_f64(labels) * log_softmax(logits), axis=-1)))


def nll_loss(log_probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean over the rows i of -log_probs[i, labels[i]] (a scalar); an index outside the row
    picks nothing (adds 0)."""
    lp = _f64(log_probs)
    k = lp.shape[-1]
    inside = (labels >= 0) & (labels < k)
    picked = lp[np.arange(len(lp)), np.where(inside, labels, 0)]
    return _f64(-np.mean(np.where(inside, picked, 0.0)))


def sparse_softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """nll_loss of log_softmax(logits) (a scalar)."""
    return nll_loss(log_softmax(logits), labels)


def binary_cross_entropy_with_logits(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Mean of max(x, 0) - x * t + log(1 + exp(-|x|)) over all elements (a scalar)."""
    x, t = _f64(logits), _f64(targets)
    return _f64(np.mean(np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))))


def mse(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Mean of the squared error over all elements (a scalar)."""
    return _f64(np.mean((_f64(pred) - _f64(target)) ** 2))


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The affine layer x . w + b, b broadcast over the rows."""
    return _f64(x) @ _f64(w) + _f64(b)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Each row of x normalised over the last axis (biased variance), scaled by gamma, shifted by
    beta."""
    x = _f64(x)
    mu = x.mean(axis=-1, keepdims=True)
    variance = x.var(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(variance + eps) * _f64(gamma) + _f64(beta)


def rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) over the last axis, scaled by gamma (PyTorch's RMSNorm)."""
    x = _f64(x)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * _f64(gamma)


def masked_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    """softmax(q @ k^T / sqrt(D)) @ v, logits where mask is false set to -1e30 (weight 0)."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e30)
    return softmax(scores) @ v


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Scaled dot-product attention over the last two axes, without a mask."""
    return masked_attention(q, k, v)


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Attention where query i sees keys j <= i only."""
    t, u = q.shape[-2], k.shape[-2]
    return masked_attention(q, k, v, np.tril(np.ones((t, u), dtype=bool)))


def multi_head_attention(
    x: np.ndarray,
    wq: np.ndarray,
    wk: np.ndarray,
    wv: np.ndarray,
    wo: np.ndarray,
    causal: bool = False,
) -> np.ndarray:
    """Self-attention of x [B, T, D] with head-split weights wq, wk, wv [D, H, K] and wo
    [H, K, D], written the textbook way: per-head projections and attention, the heads joined
    along the last axis and projected by wo as [H·K, D]."""
    x = _f64(x)
    h, k_size, d = wo.shape
    heads = []
    for i in range(h):
        q, k, v = (x @ _f64(w)[:, i, :] for w in (wq, wk, wv))
        heads.append((causal_attention if causal else attention)(q, k, v))
    joined = np.concatenate(heads, axis=-1)
    return joined @ _f64(wo).reshape(h * k_size, d)


def multi_head_attention_flat(
    x: np.ndarray,
    wq: np.ndarray,
    wk: np.ndarray,
    wv: np.ndarray,
    wo: np.ndarray,
    heads: int = 4,
    causal: bool = False,
) -> np.ndarray:
    """Self-attention of x [B, T, D] with [D, D] projections, as PyTorch's
    nn.MultiheadAttention computes it: project, split the last axis into `heads` heads of
    D / heads, attend per head, join the heads again and project by wo."""
    x = _f64(x)
    b, t, d = x.shape
    k_size = d // heads

    def split(w: np.ndarray) -> np.ndarray:  # [B, T, D] -> [B, heads, T, K]
        return (x @ _f64(w)).reshape(b, t, heads, k_size).transpose(0, 2, 1, 3)

    out = (causal_attention if causal else attention)(split(wq), split(wk), split(wv))
    return out.transpose(0, 2, 1, 3).reshape(b, t, d) @ _f64(wo)


def dropout(
    x: np.ndarray,
    p: float = 0.5,
    training: bool = False,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Inverted dropout: when training, each element is kept (scaled by 1 / (1 - p)) where a
    uniform draw in [0, 1) is >= p and zeroed elsewhere; otherwise x unchanged."""
    x = _f64(x)
    if not training:
        return x
    rng = rng if rng is not None else np.random.default_rng()
    return np.where(rng.uniform(0.0, 1.0, size=x.shape) >= p, x / (1.0 - p), 0.0)


# --- built-ins the samples use -------------------------------------------------------------------


def conv2d(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """A stride-1, unpadded 2-D cross-correlation (the kernel is not flipped): NCHW input,
    OIHW kernel, NCHW output."""
    x, k = _f64(x), _f64(k)
    _, _, h, w = x.shape
    _, _, kh, kw = k.shape
    oh, ow = h - kh + 1, w - kw + 1
    out = np.zeros((x.shape[0], k.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("bchw,oc->bohw", x[:, :, i : i + oh, j : j + ow], k[:, :, i, j])
    return out


def maxpool2d(
    x: np.ndarray, window: tuple[int, int] = (2, 2), stride: tuple[int, int] = (2, 2)
) -> np.ndarray:
    """Maximum over each window of the two last (spatial) axes of NCHW x, without padding."""
    x = _f64(x)
    (wh, ww), (sh, sw) = window, stride
    oh = (x.shape[2] - wh) // sh + 1
    ow = (x.shape[3] - ww) // sw + 1
    out = np.full(x.shape[:2] + (oh, ow), -np.inf)
    for i in range(wh):
        for j in range(ww):
            out = np.maximum(
                out, x[:, :, i : i + (oh - 1) * sh + 1 : sh, j : j + (ow - 1) * sw + 1 : sw]
            )
    return out


# --- optim ---------------------------------------------------------------------------------------


def sgd(w: np.ndarray, g: np.ndarray, rate: float = 0.01) -> np.ndarray:
    """Gradient descent: w - rate * g."""
    return _f64(w) - rate * _f64(g)


def momentum(
    w: np.ndarray, g: np.ndarray, v: np.ndarray, rate: float = 0.01, beta: float = 0.9
) -> tuple[np.ndarray, np.ndarray]:
    """Heavy-ball momentum: v' = beta * v + g, w' = w - rate * v'; returns (w', v')."""
    v_next = beta * _f64(v) + _f64(g)
    return _f64(w) - rate * v_next, v_next


def adam(
    w: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step: float,
    rate: float = 0.001,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Adam with bias correction at the 1-based `step`: returns (w', m', v') where
    m' = beta1 m + (1 - beta1) g, v' = beta2 v + (1 - beta2) g^2 and
    w' = w - rate * m_hat / (sqrt(v_hat) + eps), m_hat = m' / (1 - beta1^step),
    v_hat = v' / (1 - beta2^step)."""
    g = _f64(g)
    m_next = beta1 * _f64(m) + (1.0 - beta1) * g
    v_next = beta2 * _f64(v) + (1.0 - beta2) * g * g
    m_hat = m_next / (1.0 - beta1**step)
    v_hat = v_next / (1.0 - beta2**step)
    return _f64(w) - rate * m_hat / (np.sqrt(v_hat) + eps), m_next, v_next


def rmsprop(
    w: np.ndarray,
    g: np.ndarray,
    s: np.ndarray,
    rate: float = 0.001,
    rho: float = 0.9,
    eps: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray]:
    """RMSProp: s' = rho s + (1 - rho) g^2, w' = w - rate * g / (sqrt(s') + eps); returns
    (w', s')."""
    g = _f64(g)
    s_next = rho * _f64(s) + (1.0 - rho) * g * g
    return _f64(w) - rate * g / (np.sqrt(s_next) + eps), s_next


# --- samples -------------------------------------------------------------------------------------


def mnist(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/mnist.tel: y = tanh(x . W + b) (the loss needs the training-only `labels`)."""
    return {"y": np.tanh(linear(inputs["x"], params["W"], params["b"]))}


def digits(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/digits.tel: y = softmax(relu(x . W1 + b1) . W2 + b2)."""
    p = params
    h = relu(linear(inputs["x"], p["W1"], p["b1"]))
    return {"y": softmax(linear(h, p["W2"], p["b2"]))}


def ffnn(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/ffnn.tel, column layout: the inputs stacked along the first axis, two tanh layers
    W . h + b, and y = softmax of the transposed [C x B] scores (one row per example)."""
    p = {k: _f64(v) for k, v in params.items()}
    features = np.concatenate([_f64(inputs["xa"]), _f64(inputs["xb"])], axis=0)
    h1 = np.tanh(p["W1"] @ features + p["b1"])
    h2 = np.tanh(p["W2"] @ h1 + p["b2"])
    scores = p["W3"] @ h2 + p["b3"]
    return {"y": softmax(scores.T)}


def rnn(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/rnn.tel: h_t = tanh(x_t . Wx + h_{t-1} . Wh + bh) from h = 0; `states` stacks
    every h_t, `logp` = log_softmax(h_last . Wy + by)."""
    p = {k: _f64(v) for k, v in params.items()}
    xs = _f64(inputs["xs"])
    h = np.zeros((xs.shape[1], p["Wh"].shape[0]))
    states = []
    for x in xs:
        h = np.tanh(x @ p["Wx"] + h @ p["Wh"] + p["bh"])
        states.append(h)
    return {"states": np.stack(states), "logp": log_softmax(linear(h, p["Wy"], p["by"]))}


def xor(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/xor.tel: y = sigmoid(tanh(x . W1 + b1) . W2 + b2)."""
    p = params
    h = np.tanh(linear(inputs["x"], p["W1"], p["b1"]))
    return {"y": sigmoid(linear(h, p["W2"], p["b2"]))}


def cnn(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/cnn.tel: relu(conv2d(x, K) + kb), 2x2 max pooling, flattened per image (C order),
    then y = softmax(flat . W + b)."""
    p = params
    x = _f64(inputs["x"])
    conv = relu(conv2d(x, p["K"]) + _f64(p["kb"]))
    pooled = maxpool2d(conv)
    flat = pooled.reshape(x.shape[0], -1)
    return {"y": softmax(linear(flat, p["W"], p["b"]))}


def lstm(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/lstm.tel: an LSTM from h = c = 0 with gates i, f, o = sigmoid(x_t . W + h . U + b)
    and candidate g = tanh(…), c_t = f c_{t-1} + i g, h_t = o tanh(c_t);
    y = softmax(h_last . Wy + by)."""
    p = {k: _f64(v) for k, v in params.items()}
    xs = _f64(inputs["xs"])
    h = np.zeros((xs.shape[1], p["Ui"].shape[0]))
    c = np.zeros_like(h)

    def gate(x: np.ndarray, name: str) -> np.ndarray:
        return x @ p["W" + name] + h @ p["U" + name] + p["b" + name]

    for x in xs:
        i, f, o = sigmoid(gate(x, "i")), sigmoid(gate(x, "f")), sigmoid(gate(x, "o"))
        c = f * c + i * np.tanh(gate(x, "g"))
        h = o * np.tanh(c)
    return {"y": softmax(linear(h, p["Wy"], p["by"]))}


def autoencoder(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/autoencoder.tel at inference (dropout is the identity): code, reconstruction, and
    the mean squared reconstruction error `loss`, which needs only x and so is an infer output."""
    p = params
    x = _f64(inputs["x"])
    enc = gelu(layer_norm(linear(dropout(x, 0.1), p["We1"], p["be1"]), p["ln_g"], p["ln_b"]))
    code = np.tanh(linear(enc, p["We2"], p["be2"]))
    dec = leaky_relu(linear(code, p["Wd1"], p["bd1"]), 0.1)
    recon = sigmoid(linear(dec, p["Wd2"], p["bd2"]))
    return {"code": code, "recon": recon, "loss": mse(recon, x)}


def transformer(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/transformer.tel: token plus position embeddings, two pre-norm blocks
    x + mha(layer_norm(x)) (causal), then x + gelu(layer_norm(x) . Wup + bup) . Wdown + bdown,
    and logits = layer_norm(x) . Wout + bout."""
    p = {k: _f64(v) for k, v in params.items()}
    x = p["tokens"][np.asarray(inputs["ids"])] + p["positions"]
    for i in ("1", "2"):
        normed = layer_norm(x, p[f"norm{i}a"], p[f"shift{i}a"])
        weights = (p[f"Wq{i}"], p[f"Wk{i}"], p[f"Wv{i}"], p[f"Wo{i}"])
        x = x + multi_head_attention(normed, *weights, causal=True)
        up = gelu(layer_norm(x, p[f"norm{i}b"], p[f"shift{i}b"]) @ p[f"W{i}up"] + p[f"b{i}up"])
        x = x + up @ p[f"W{i}down"] + p[f"b{i}down"]
    return {"logits": layer_norm(x, p["normf"], p["shiftf"]) @ p["Wout"] + p["bout"]}


def batch_norm2d(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray
) -> np.ndarray:
    """(x - mean) / sqrt(var + 1e-5) * gamma + beta, per channel of NCHW x."""
    return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta


def channel_stats(x: np.ndarray, unbiased: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The mean and variance (biased, or unbiased: divided by count - 1) of each channel of
    NCHW x, as [1, C, 1, 1]."""
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    return mean, x.var(axis=(0, 2, 3), keepdims=True, ddof=int(unbiased))


def resnet_layers(inputs: Arrays, params: Arrays, training: bool = False) -> Arrays:
    """samples/resnet.tel's values: stem = relu(conv(x, K0) + k0); conv1 = conv(stem, K1);
    conv2 = conv(relu(bn(conv1)), K2); y = softmax(mean over pixels of relu(bn(conv2) + stem)
    . W + b), the convolutions 3x3 with padding 1, each bn with the batch's statistics when
    `training`, else the running ones in the buffers mean1, var1, mean2, var2."""
    p = {k: _f64(v) for k, v in params.items()}

    def conv(x: np.ndarray, k: np.ndarray) -> np.ndarray:
        return conv2d(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), k)

    def bn(x: np.ndarray, i: str) -> np.ndarray:
        stats = channel_stats(x) if training else (p[f"mean{i}"], p[f"var{i}"])
        return batch_norm2d(x, p[f"gamma{i}"], p[f"beta{i}"], *stats)

    stem = relu(conv(_f64(inputs["x"]), p["K0"]) + p["k0"])
    conv1 = conv(stem, p["K1"])
    conv2 = conv(relu(bn(conv1, "1")), p["K2"])
    block = relu(bn(conv2, "2") + stem)
    y = softmax(linear(block.mean(axis=(2, 3)), p["W"], p["b"]))
    return {"conv1": conv1, "conv2": conv2, "y": y}


def resnet(inputs: Arrays, params: Arrays) -> Arrays:
    """samples/resnet.tel's infer: y with the running statistics."""
    return {"y": resnet_layers(inputs, params)["y"]}


SAMPLES: dict[str, Callable[[Arrays, Arrays], Arrays]] = {
    "mnist": mnist,
    "digits": digits,
    "ffnn": ffnn,
    "rnn": rnn,
    "xor": xor,
    "cnn": cnn,
    "lstm": lstm,
    "autoencoder": autoencoder,
    "transformer": transformer,
    "resnet": resnet,
}
