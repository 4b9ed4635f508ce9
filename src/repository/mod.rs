//! Repository credentials (SPEC §19): Git access for a revision through sessions a native
//! repository sender opens. This module holds the worker's side of the sender: its HTTPS
//! client (`sender`, SPEC G20, G21) and the readiness the health beat asks of it (SPEC G7).

pub mod sender;

pub use sender::{
    Material, OpenAnswer, OpenRequest, RepositorySender, SenderError, SessionRequest, SessionState,
    REPOSITORY_SENDER_UNAVAILABLE, REPOSITORY_SESSION_REFUSED,
};
