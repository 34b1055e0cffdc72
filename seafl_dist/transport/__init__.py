"""Moving flat tensors between ranks: headers, isend/irecv mailboxes. No decisions here."""
from seafl_dist.transport.messages import BYE, JOB, RESULT, STOP, Header, MessageError, check_payload
from seafl_dist.transport.p2p import Mailbox, Outbox

__all__ = ["BYE", "JOB", "RESULT", "STOP", "Header", "Mailbox", "MessageError", "Outbox", "check_payload"]
