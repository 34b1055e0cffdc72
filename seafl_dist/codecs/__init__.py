"""Codecs: what a device's upload holds and how many bytes it costs (``compression.*``; docs/compression.md).

This room owns the bytes of an upload and nothing else: turning a trained model and its base into the upload
(:meth:`UpdateCodec.encode`, where every training path hands back its result: runtime/executor.py), the upload back
into a model (:meth:`UpdateCodec.decode`, stage 1 of the server), its size (:attr:`UpdateCodec.upload_bytes`, which
the virtual clock charges), and each device's error-feedback residual (codecs/feedback.py). Pure tensor functions,
like FLSim's channels (encode on the client, decode on the server, bytes counted) and PLATO's processors: no
transport, no schedule, no config object beyond the ``compression`` section handed in.

    codec = UpdateCodec(cfg.compression, FlatLayout.of(model))
    upload = codec.encode(trained, base, seed)     # uint8 bytes (a codec), or the model itself (none)
    w_k = codec.decode(upload, base)
"""
from seafl_dist.codecs.feedback import ErrorFeedback  # noqa: F401
from seafl_dist.codecs.update import UpdateCodec  # noqa: F401

__all__ = ["ErrorFeedback", "UpdateCodec"]
