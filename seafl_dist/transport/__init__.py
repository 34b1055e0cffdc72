"""Moving flat tensors between ranks: headers, isend/irecv mailboxes. No decisions here."""
from seafl_dist.transport.messages import (BYE, JOB, LOGS, RESULT, SAVE, SAVED, STOP, TAKEN, Header, MessageError,
                                           check_payload, decode_logs, encode_logs)
from seafl_dist.transport.p2p import Channel, Mailbox, Outbox, TransportError, make_links

__all__ = ["BYE", "Channel", "JOB", "LOGS", "RESULT", "SAVE", "SAVED", "STOP", "TAKEN", "Header", "Mailbox",
           "MessageError", "Outbox", "TransportError", "check_payload", "decode_logs", "encode_logs", "make_links"]
