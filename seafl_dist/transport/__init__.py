"""Moving flat tensors between ranks: headers, isend/irecv mailboxes. No decisions here."""
from seafl_dist.transport.messages import BYE, JOB, RESULT, STOP, Header, MessageError, check_payload
from seafl_dist.transport.p2p import Channel, Mailbox, Outbox, TransportError, make_links

__all__ = ["BYE", "Channel", "JOB", "RESULT", "STOP", "Header", "Mailbox", "MessageError", "Outbox", "TransportError", "check_payload", "make_links"]
