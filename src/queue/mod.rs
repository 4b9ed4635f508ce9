//! The durable work queue (SPEC Q1-Q13): one method per SQL statement, named `work_<verb>`.
//!
//! Every transition of a claimed work is written "only if still mine": the work joined to its
//! lane row's claim (V14: the claimed work, the claim token and a live lease) is in the
//! `WHERE`, and zero rows means the claim was lost, never success. The statements live in
//! `sql/queries/`; no other module writes queue SQL. Ages and deadlines come from the
//! database clock.

use crate::db::{literal, Conn, DbError, Execute, GenericClient, Named, Tx};
pub use holder::Holder;
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::time::Duration;

mod holder;

const ENQUEUE: &str = include_str!("../../sql/queries/work_enqueue.sql");
const CLAIM: &str = include_str!("../../sql/queries/work_claim.sql");
const HEARTBEAT: &str = include_str!("../../sql/queries/work_heartbeat.sql");
const LOCK_CLAIM: &str = include_str!("../../sql/queries/work_lock_claim.sql");
const LOCK_CLAIMS: &str = include_str!("../../sql/queries/work_lock_claims.sql");
const COMPLETE_BATCH: &str = include_str!("../../sql/queries/work_complete_batch.sql");
const FAIL: &str = include_str!("../../sql/queries/work_fail.sql");
const RETRY: &str = include_str!("../../sql/queries/work_retry.sql");
const DEFER: &str = include_str!("../../sql/queries/work_defer.sql");
const RELEASE: &str = include_str!("../../sql/queries/work_release.sql");
const RECOVER_STALE: &str = include_str!("../../sql/queries/work_recover_stale.sql");
const PENDING_COUNT: &str = include_str!("../../sql/queries/work_pending_count.sql");
const LIST: &str = include_str!("../../sql/queries/work_list.sql");
const SHOW: &str = include_str!("../../sql/queries/work_show.sql");
const CLOCK: &str = include_str!("../../sql/queries/work_clock.sql");
const WITHDRAWAL_REQUEUE: &str =
    include_str!("../../sql/queries/work_enqueue_withdrawal_requeue.sql");
const WITHDRAWAL_ACTIVATION: &str =
    include_str!("../../sql/queries/work_enqueue_withdrawal_activation.sql");
const ENQUEUE_WITHDRAWAL_RECOVERY: &str =
    include_str!("../../sql/queries/work_enqueue_withdrawal_recovery.sql");
const ENQUEUE_WITHDRAWAL_FOLLOWUP: &str =
    include_str!("../../sql/queries/work_enqueue_withdrawal_followup.sql");

/// The kind of controller operation a row asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    NamespaceEnsure,
    NamespaceDelete,
    AgentStop,
    AgentDelete,
    RevisionReconcile,
    RevisionMaintenance,
    /// An Agent's sandbox policy (SPEC S3).
    SandboxPolicy,
    /// A credential withdrawal from one revision's runtime (SPEC §13).
    CredentialWithdrawal,
    /// A revision's repository cleanup (SPEC §12, G1).
    RepositoryCleanup,
}

impl Operation {
    /// The operation's name on `worker.completed` (SPEC W7x): the seed's dotted names, a
    /// maintenance pass included under its revision's reconciliation. `as_str` stays the
    /// `work.operation` value and the metric label.
    pub fn event_name(self) -> &'static str {
        match self {
            Operation::NamespaceEnsure => "namespace.ensure",
            Operation::NamespaceDelete => "namespace.delete",
            Operation::AgentStop => "agent.stop",
            Operation::AgentDelete => "agent.delete",
            Operation::RevisionReconcile | Operation::RevisionMaintenance => {
                "agent_revision.reconcile"
            }
            Operation::SandboxPolicy => "agent.sandbox_policy",
            Operation::CredentialWithdrawal => "agent_revision.credential_withdrawal",
            Operation::RepositoryCleanup => "agent_revision.repository_cleanup",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::NamespaceEnsure => "namespace_ensure",
            Operation::NamespaceDelete => "namespace_delete",
            Operation::AgentStop => "agent_stop",
            Operation::AgentDelete => "agent_delete",
            Operation::RevisionReconcile => "revision_reconcile",
            Operation::RevisionMaintenance => "revision_maintenance",
            Operation::SandboxPolicy => "agent_sandbox_policy",
            Operation::CredentialWithdrawal => "agent_credential_withdrawal",
            Operation::RepositoryCleanup => "agent_repository_cleanup",
        }
    }

    pub const ALL: [Operation; 9] = [
        Operation::NamespaceEnsure,
        Operation::NamespaceDelete,
        Operation::AgentStop,
        Operation::AgentDelete,
        Operation::RevisionReconcile,
        Operation::RevisionMaintenance,
        Operation::SandboxPolicy,
        Operation::CredentialWithdrawal,
        Operation::RepositoryCleanup,
    ];

    fn parse(s: &str) -> Option<Operation> {
        Operation::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// A new row. Build it with a constructor so shapes cannot be mixed (Q2).
#[derive(Clone, Debug)]
pub struct NewWork {
    key: String,
    namespace_id: String,
    agent_id: Option<String>,
    revision_id: Option<String>,
    namespace_target: Option<&'static str>,
    agent_target: Option<&'static str>,
    actor_id: String,
}

impl NewWork {
    /// `namespace:<id>:ensure`.
    pub fn namespace_ensure(namespace_id: &str, actor_id: &str) -> NewWork {
        NewWork {
            key: format!("namespace:{namespace_id}:ensure"),
            namespace_id: namespace_id.into(),
            agent_id: None,
            revision_id: None,
            namespace_target: Some("ready"),
            agent_target: None,
            actor_id: actor_id.into(),
        }
    }

    /// `namespace:<id>:delete` for the first teardown, `:delete:<n>` for an explicit retry.
    pub fn namespace_delete(namespace_id: &str, retry: Option<u32>, actor_id: &str) -> NewWork {
        NewWork {
            key: match retry {
                None => format!("namespace:{namespace_id}:delete"),
                Some(n) => format!("namespace:{namespace_id}:delete:{n}"),
            },
            namespace_id: namespace_id.into(),
            agent_id: None,
            revision_id: None,
            namespace_target: Some("deleted"),
            agent_target: None,
            actor_id: actor_id.into(),
        }
    }

    /// `agent:<id>:stop:<n>`.
    pub fn agent_stop(namespace_id: &str, agent_id: &str, n: u32, actor_id: &str) -> NewWork {
        NewWork {
            key: format!("agent:{agent_id}:stop:{n}"),
            namespace_id: namespace_id.into(),
            agent_id: Some(agent_id.into()),
            revision_id: None,
            namespace_target: None,
            agent_target: Some("stopped"),
            actor_id: actor_id.into(),
        }
    }

    /// `agent:<id>:delete[:<n>]`.
    pub fn agent_delete(
        namespace_id: &str,
        agent_id: &str,
        retry: Option<u32>,
        actor_id: &str,
    ) -> NewWork {
        NewWork {
            key: match retry {
                None => format!("agent:{agent_id}:delete"),
                Some(n) => format!("agent:{agent_id}:delete:{n}"),
            },
            namespace_id: namespace_id.into(),
            agent_id: Some(agent_id.into()),
            revision_id: None,
            namespace_target: None,
            agent_target: Some("deleted"),
            actor_id: actor_id.into(),
        }
    }

    /// `agent_revision:<rev>:reconcile`.
    pub fn revision_reconcile(
        namespace_id: &str,
        agent_id: &str,
        revision_id: &str,
        actor_id: &str,
    ) -> NewWork {
        NewWork {
            key: format!("agent_revision:{revision_id}:reconcile"),
            namespace_id: namespace_id.into(),
            agent_id: Some(agent_id.into()),
            revision_id: Some(revision_id.into()),
            namespace_target: None,
            agent_target: None,
            actor_id: actor_id.into(),
        }
    }

    /// `agent_revision:<rev>:maintenance:<bucket>`.
    pub fn revision_maintenance(
        namespace_id: &str,
        agent_id: &str,
        revision_id: &str,
        bucket: i64,
        actor_id: &str,
    ) -> NewWork {
        NewWork {
            key: format!("agent_revision:{revision_id}:maintenance:{bucket}"),
            namespace_id: namespace_id.into(),
            agent_id: Some(agent_id.into()),
            revision_id: Some(revision_id.into()),
            namespace_target: None,
            agent_target: None,
            actor_id: actor_id.into(),
        }
    }

    /// `agent:<id>:sandbox_policy:<generation>` (SPEC S3, §12).
    pub fn sandbox_policy(
        namespace_id: &str,
        agent_id: &str,
        generation: i32,
        actor_id: &str,
    ) -> NewWork {
        NewWork {
            key: format!("agent:{agent_id}:sandbox_policy:{generation}"),
            namespace_id: namespace_id.into(),
            agent_id: Some(agent_id.into()),
            revision_id: None,
            namespace_target: None,
            agent_target: Some("sandbox_policy"),
            actor_id: actor_id.into(),
        }
    }

    /// `agent_revision:<rev>:repository_cleanup:<kind>` (SPEC §12, G1): one row per
    /// (revision, kind).
    pub fn repository_cleanup(
        namespace_id: &str,
        agent_id: &str,
        revision_id: &str,
        kind: CleanupKind,
        actor_id: &str,
    ) -> NewWork {
        NewWork {
            key: format!(
                "agent_revision:{revision_id}:repository_cleanup:{}",
                kind.as_str()
            ),
            namespace_id: namespace_id.into(),
            agent_id: Some(agent_id.into()),
            revision_id: Some(revision_id.into()),
            namespace_target: None,
            agent_target: Some("repository_cleanup"),
            actor_id: actor_id.into(),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }
}

/// The kind a repository cleanup key names (SPEC G1): two retire the revision's runtime, one
/// withdraws expired access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CleanupKind {
    /// A deployment that failed in a way that needs durable retirement (SPEC Z3, G2).
    FailedPreparation,
    /// A runtime retired for good (SPEC G2: supersession, G12, G14).
    TerminalRuntime,
    /// A standing approval's withdrawal (SPEC G15): the expiry kind.
    StandingWithdrawal,
}

impl CleanupKind {
    pub const ALL: [CleanupKind; 3] = [
        CleanupKind::FailedPreparation,
        CleanupKind::TerminalRuntime,
        CleanupKind::StandingWithdrawal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CleanupKind::FailedPreparation => "failed-preparation",
            CleanupKind::TerminalRuntime => "terminal-runtime",
            CleanupKind::StandingWithdrawal => "standing-withdrawal",
        }
    }

    /// The kind a cleanup work's key names; `None` for any other key.
    pub fn of_key(key: &str) -> Option<CleanupKind> {
        let (_, kind) = key.rsplit_once(":repository_cleanup:")?;
        CleanupKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// Whether this kind retires the revision's runtime (the others withdraw expired access).
    pub fn retires_runtime(self) -> bool {
        !matches!(self, CleanupKind::StandingWithdrawal)
    }
}

/// A live claim: what the claiming worker owns until its lease runs out.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    pub id: i64,
    #[serde(skip)]
    pub token: String,
    pub key: String,
    pub operation: Operation,
    pub namespace_id: String,
    pub agent_id: Option<String>,
    pub revision_id: Option<String>,
    pub namespace_target: Option<String>,
    pub agent_target: Option<String>,
    pub actor_id: String,
    pub attempt: i32,
    /// The work's age by the database clock when the claim was granted.
    pub age_ms: i64,
    /// The lane the schema assigns (`namespace:<id>` or `agent:<id>`, Q4).
    pub lane: String,
}

/// Queue errors: the claim was lost, or the database failed.
#[derive(Debug)]
pub enum QueueError {
    /// The statement found no live claim with this token: another worker may own the work.
    ClaimLost,
    Db(DbError),
}

impl QueueError {
    pub fn is_claim_lost(&self) -> bool {
        matches!(self, QueueError::ClaimLost)
    }
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueError::ClaimLost => write!(f, "claim lost"),
            QueueError::Db(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for QueueError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QueueError::ClaimLost => None,
            // Transparent: its `Display` is the database error's own.
            QueueError::Db(e) => e.source(),
        }
    }
}

impl From<postgres::Error> for QueueError {
    fn from(e: postgres::Error) -> QueueError {
        QueueError::Db(DbError::Query(e))
    }
}

impl From<DbError> for QueueError {
    fn from(e: DbError) -> QueueError {
        QueueError::Db(e)
    }
}

/// The queue's tunables.
#[derive(Clone, Copy, Debug)]
pub struct QueueOptions {
    pub lease: Duration,
    pub max_attempts: i32,
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// The worker process every claim names (V29): this process unless a test says otherwise.
    pub holder: Holder,
}

impl QueueOptions {
    pub fn new(lease: Duration, max_attempts: i32) -> QueueOptions {
        QueueOptions {
            lease,
            max_attempts,
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(300),
            holder: Holder::this_process(),
        }
    }
}

/// Whether `work_enqueue` inserted a new row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enqueued {
    pub id: i64,
    pub inserted: bool,
}

/// Where a retried work went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryOutcome {
    Queued,
    /// The attempt budget was spent: the work failed instead (Q7).
    Failed,
}

/// What one recovery sweep changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovered {
    pub requeued: i64,
    pub failed: i64,
    pub failed_namespaces: i64,
    /// Sandbox policies failed with their work (SPEC S4).
    pub failed_policies: i64,
}

/// Queue depth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Pending {
    pub queued: i64,
    pub claimed: i64,
    /// How long the oldest claimable work has been due (0 when none is).
    #[serde(skip)]
    pub oldest_due_seconds: f64,
}

fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// Enqueues `work`, claimable at once; an existing key changes nothing (Q3).
pub fn work_enqueue(
    client: &mut impl GenericClient,
    work: &NewWork,
) -> Result<Enqueued, QueueError> {
    work_enqueue_at(client, work, Duration::ZERO)
}

/// Enqueues `work`, claimable `delay` from now by the database clock; an existing key changes
/// nothing (Q3).
pub fn work_enqueue_at(
    client: &mut impl GenericClient,
    work: &NewWork,
    delay: Duration,
) -> Result<Enqueued, QueueError> {
    let row = client.query_one(
        ENQUEUE,
        &[
            &work.key,
            &work.namespace_id,
            &work.agent_id,
            &work.revision_id,
            &work.namespace_target,
            &work.agent_target,
            &work.actor_id,
            &ms(delay),
        ],
    )?;
    Ok(Enqueued {
        id: row.get(0),
        inserted: row.get(1),
    })
}

/// SPEC E14's maintenance re-queue of the active revision `revision_id` and its companions,
/// inside a transaction that locked the Namespace: the revisions whose first pending row was
/// collected, each with the key enqueued for it (`None` when the row needed no attempt). An
/// empty answer: nothing was pending.
pub fn work_enqueue_withdrawal_requeue(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
    revision_id: &str,
) -> Result<Vec<(String, Option<String>)>, QueueError> {
    let rows = client.query(
        WITHDRAWAL_REQUEUE,
        &[&namespace_id, &agent_id, &revision_id],
    )?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// SPEC E16: in the transaction that completes a candidate's reconcile work with its
/// activation, the `activation` and `retirement` withdrawal works of rows refused
/// `CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT`. The keys enqueued.
pub fn work_enqueue_withdrawal_activation(
    client: &mut impl GenericClient,
    namespace_id: &str,
    agent_id: &str,
    revision_id: &str,
    revision: i32,
) -> Result<Vec<String>, QueueError> {
    let rows = client.query(
        WITHDRAWAL_ACTIVATION,
        &[&namespace_id, &agent_id, &revision_id, &revision],
    )?;
    Ok(rows.iter().filter_map(|r| r.get(0)).collect())
}

/// Claims the oldest available work in a free lane, or `None` (Q4).
pub fn work_claim(
    client: &mut impl GenericClient,
    options: &QueueOptions,
) -> Result<Option<Claim>, QueueError> {
    Ok(work_claim_batch(client, options, 1)?.into_iter().next())
}

/// Claims up to `limit` works in one statement, each the head of a distinct free lane, the
/// oldest due first (Q4). Empty when nothing is claimable now.
pub fn work_claim_batch(
    client: &mut impl GenericClient,
    options: &QueueOptions,
    limit: usize,
) -> Result<Vec<Claim>, QueueError> {
    // Concurrent claims never meet: each locks the lane rows it takes (SKIP LOCKED), and a
    // lane row holds one claim (V14).
    let limit = limit.clamp(1, 1 << 20) as i64;
    let holder = &options.holder;
    let rows = client.query(
        CLAIM,
        &[
            &ms(options.lease),
            &limit,
            &holder.id,
            &holder.host,
            &holder.pid_column(),
        ],
    )?;
    rows.iter().map(claim_from_row).collect()
}

/// A claim's columns, read from a prepared statement's binary row or from the text row of a
/// statement sent with others (`work_begin_locking_claims`, `work_commit_completing_and_claiming`).
/// `claim_from_row` and `claim_ids` are the only decoders of the queue's claims, whichever way
/// their rows came.
trait Columns {
    fn int<T: std::str::FromStr + for<'a> postgres::types::FromSql<'a>>(
        &self,
        i: usize,
    ) -> Result<T, QueueError>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, QueueError>;
    fn text(&self, i: usize) -> Result<String, QueueError> {
        self.opt_text(i)?
            .ok_or_else(|| malformed(format!("column {i} of a claim is NULL")))
    }
}

fn malformed(what: String) -> QueueError {
    QueueError::Db(DbError::Corrupt(what))
}

impl Columns for postgres::Row {
    fn int<T: std::str::FromStr + for<'a> postgres::types::FromSql<'a>>(
        &self,
        i: usize,
    ) -> Result<T, QueueError> {
        Ok(self.try_get(i)?)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, QueueError> {
        Ok(self.try_get(i)?)
    }
}

impl Columns for postgres::SimpleQueryRow {
    fn int<T: std::str::FromStr + for<'a> postgres::types::FromSql<'a>>(
        &self,
        i: usize,
    ) -> Result<T, QueueError> {
        self.text(i)?
            .parse()
            .map_err(|_| malformed(format!("column {i} of a claim is not a number")))
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, QueueError> {
        Ok(self.try_get(i)?.map(str::to_owned))
    }
}

/// The claim a claim statement's row describes (`work_claim.sql`'s columns, in order).
fn claim_from_row(row: &impl Columns) -> Result<Claim, QueueError> {
    let operation = row.text(3)?;
    Ok(Claim {
        id: row.int(0)?,
        token: row.text(1)?,
        key: row.text(2)?,
        operation: Operation::parse(&operation)
            .ok_or_else(|| malformed(format!("unknown work operation {operation:?}")))?,
        namespace_id: row.text(4)?,
        agent_id: row.opt_text(5)?,
        revision_id: row.opt_text(6)?,
        namespace_target: row.opt_text(7)?,
        agent_target: row.opt_text(8)?,
        actor_id: row.text(9)?,
        attempt: row.int(10)?,
        age_ms: row.int(11)?,
        lane: row.text(12)?,
    })
}

/// The ids a lock or a completion of claims answered (its first column).
fn claim_ids(rows: &[impl Columns]) -> Result<Vec<i64>, QueueError> {
    rows.iter().map(|row| row.int(0)).collect()
}

/// Renews the lease of a live claim; returns the work's database age in milliseconds (Q5).
pub fn work_heartbeat(
    client: &mut impl GenericClient,
    claim: &Claim,
    options: &QueueOptions,
) -> Result<i64, QueueError> {
    client
        .query_opt(HEARTBEAT, &[&claim.id, &claim.token, &ms(options.lease)])?
        .map(|row| row.get(0))
        .ok_or(QueueError::ClaimLost)
}

/// Inside a finalizing transaction: locks the row of the live claim, or `ClaimLost` (Q6).
/// Returns the work's database age in milliseconds.
pub fn work_lock_claim(client: &mut impl GenericClient, claim: &Claim) -> Result<i64, QueueError> {
    client
        .query_opt(LOCK_CLAIM, &[&claim.id, &claim.token])?
        .map(|row| row.get(0))
        .ok_or(QueueError::ClaimLost)
}

/// Inside a finalizing transaction: locks the rows of the live claims among `claims` in one
/// statement (Q6); returns the ids locked. A claim whose id is missing was lost.
pub fn work_lock_claims(
    client: &mut impl GenericClient,
    claims: &[&Claim],
) -> Result<Vec<i64>, QueueError> {
    let ids: Vec<i64> = claims.iter().map(|c| c.id).collect();
    let tokens: Vec<&str> = claims.iter().map(|c| c.token.as_str()).collect();
    claim_ids(&client.query(LOCK_CLAIMS, &[&ids, &tokens])?)
}

/// Completes every claim of `done` (`succeeded`) in one statement, each with its code and
/// result data, or none of them: a claim no longer live fails the statement (V16). Returns the
/// ids completed.
pub fn work_complete_batch(
    client: &mut impl GenericClient,
    done: &[(&Claim, &str, Option<&Value>)],
) -> Result<Vec<i64>, QueueError> {
    let ids: Vec<i64> = done.iter().map(|(c, _, _)| c.id).collect();
    let tokens: Vec<&str> = done.iter().map(|(c, _, _)| c.token.as_str()).collect();
    let codes: Vec<&str> = done.iter().map(|(_, code, _)| *code).collect();
    let data: Vec<Option<&Value>> = done.iter().map(|(_, _, d)| *d).collect();
    claim_ids(&client.query(COMPLETE_BATCH, &[&ids, &tokens, &codes, &data])?)
}

/// The statements a publication sends together with its `BEGIN` and its `COMMIT`
/// (`work_begin_locking_claims`, `work_commit_completing_and_claiming`): the same texts as
/// `work_lock_claims`, `work_complete_batch` and `work_claim_batch`, prepared by name.
static LOCK_CLAIMS_NAMED: Named = Named {
    name: "occ_work_lock_claims",
    sql: LOCK_CLAIMS,
};
static COMPLETE_BATCH_NAMED: Named = Named {
    name: "occ_work_complete_batch",
    sql: COMPLETE_BATCH,
};
static CLAIM_NAMED: Named = Named {
    name: "occ_work_claim",
    sql: CLAIM,
};

/// Begins a publication's transaction and locks the live claims among `claims` in the same
/// message (`work_lock_claims`, Q6): one round trip. Returns the transaction and the ids
/// locked; a claim whose id is missing was lost. A failed lock rolls the transaction back.
pub fn work_begin_locking_claims<'c>(
    conn: &'c mut Conn,
    claims: &[&Claim],
) -> Result<(Tx<'c>, Vec<i64>), QueueError> {
    let lock = Execute {
        statement: &LOCK_CLAIMS_NAMED,
        args: vec![
            literal::bigints(claims.iter().map(|c| c.id)),
            literal::texts(claims.iter().map(|c| c.token.as_str())),
        ],
    };
    let (tx, mut rows) = conn.begin_with(&[lock])?;
    let live = claim_ids(&rows.pop().unwrap_or_default())?;
    Ok((tx, live))
}

/// Ends a publication's transaction in one round trip: completes `done` (`work_complete_batch`:
/// all or none), claims up to `limit` works (`work_claim_batch`; none when 0) and commits, in
/// one message.
///
/// `Ok` means it committed: every work of `done` completed, and the claims made (their rows,
/// read after the commit, are the inner result; a row that cannot be read leaves its claim to
/// run out and be recovered, never to run twice). `Err` means nothing of the transaction
/// committed, unless the error has no SQLSTATE: the connection failed, perhaps after the
/// commit.
#[allow(clippy::type_complexity)]
pub fn work_commit_completing_and_claiming(
    tx: Tx<'_>,
    done: &[(&Claim, &str, Option<&Value>)],
    options: &QueueOptions,
    limit: usize,
) -> Result<Result<Vec<Claim>, QueueError>, QueueError> {
    let mut statements = Vec::with_capacity(2);
    if !done.is_empty() {
        statements.push(Execute {
            statement: &COMPLETE_BATCH_NAMED,
            args: vec![
                literal::bigints(done.iter().map(|(c, _, _)| c.id)),
                literal::texts(done.iter().map(|(c, _, _)| c.token.as_str())),
                literal::texts(done.iter().map(|(_, code, _)| *code)),
                literal::jsonbs(done.iter().map(|(_, _, data)| *data)),
            ],
        });
    }
    if limit > 0 {
        statements.push(Execute {
            statement: &CLAIM_NAMED,
            args: vec![
                literal::bigint(ms(options.lease)),
                literal::bigint(limit.clamp(1, 1 << 20) as i64),
                literal::text(options.holder.id),
                literal::text(options.holder.host),
                literal::integer(options.holder.pid_column()),
            ],
        });
    }
    let rows = tx.commit_with(&statements)?;
    Ok(match (limit, rows.last()) {
        (0, _) | (_, None) => Ok(Vec::new()),
        (_, Some(claimed)) => claimed.iter().map(claim_from_row).collect(),
    })
}

/// Completes the claim (`succeeded`): a batch of one (`work_complete_batch`), whose refusal of a
/// claim no longer live is `ClaimLost` here. Inside a transaction, that refusal aborts it (or
/// the unit's savepoint).
pub fn work_complete(
    client: &mut impl GenericClient,
    claim: &Claim,
    code: &str,
    result_data: Option<&Value>,
) -> Result<(), QueueError> {
    match work_complete_batch(client, &[(claim, code, result_data)]) {
        Ok(_) => Ok(()),
        Err(QueueError::Db(DbError::Query(e)))
            if e.code().is_some_and(|c| c.code() == CLAIM_NOT_LIVE) =>
        {
            Err(QueueError::ClaimLost)
        }
        Err(e) => Err(e),
    }
}

/// The SQLSTATE of `occ.require_live_claims`' refusal of a completion naming a claim no
/// longer live (its own code, not a generic class, so nothing else can be mistaken for it).
const CLAIM_NOT_LIVE: &str = "OC001";

/// Fails the claim for good (`failed_permanent`).
pub fn work_fail(
    client: &mut impl GenericClient,
    claim: &Claim,
    code: &str,
    result_data: Option<&Value>,
    refusal: Option<&str>,
) -> Result<(), QueueError> {
    let rows = client.query(
        FAIL,
        &[&claim.id, &claim.token, &code, &result_data, &refusal],
    )?;
    if rows.is_empty() {
        return Err(QueueError::ClaimLost);
    }
    Ok(())
}

/// Returns the claim to the queue with backoff, or fails it at the attempt limit (Q7).
pub fn work_retry(
    client: &mut impl GenericClient,
    claim: &Claim,
    code: &str,
    options: &QueueOptions,
) -> Result<RetryOutcome, QueueError> {
    let row = client.query_opt(
        RETRY,
        &[
            &claim.id,
            &claim.token,
            &code,
            &options.max_attempts,
            &ms(options.retry_base),
            &ms(options.retry_cap),
        ],
    )?;
    match row {
        None => Err(QueueError::ClaimLost),
        Some(row) => {
            let requeued: bool = row.get(1);
            Ok(if requeued {
                RetryOutcome::Queued
            } else {
                RetryOutcome::Failed
            })
        }
    }
}

/// Defers pending convergence: back to the queue after `delay`, attempt refunded (Q8).
/// Evidence is written when `record_evidence` holds or a `refusal` is given (R9: a refused
/// candidate whose stop is pending keeps its refusal for the next pass).
pub fn work_defer(
    client: &mut impl GenericClient,
    claim: &Claim,
    code: &str,
    delay: Duration,
    record_evidence: bool,
    refusal: Option<&str>,
) -> Result<(), QueueError> {
    work_defer_with_cause(client, claim, code, delay, record_evidence, refusal, None)
}

/// `work_defer`, whose evidence also keeps the cause a pending repository cleanup waits on
/// (SPEC G3): recorded whenever there is one that fits `^[A-Za-z][A-Za-z0-9_]{0,63}$`.
pub fn work_defer_with_cause(
    client: &mut impl GenericClient,
    claim: &Claim,
    code: &str,
    delay: Duration,
    record_evidence: bool,
    refusal: Option<&str>,
    cause: Option<&str>,
) -> Result<(), QueueError> {
    let cause = cause.filter(|c| storable_cause(c));
    let rows = client.query(
        DEFER,
        &[
            &claim.id,
            &claim.token,
            &code,
            &ms(delay),
            &record_evidence,
            &refusal,
            &cause,
        ],
    )?;
    if rows.is_empty() {
        return Err(QueueError::ClaimLost);
    }
    Ok(())
}

/// Whether `cause` fits the evidence column (`work_attempts_cause_check`).
fn storable_cause(cause: &str) -> bool {
    let mut chars = cause.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && cause.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Releases the claim of a pass interrupted by a stopping worker: queued at once, the attempt
/// refunded, `code` as evidence (W4).
pub fn work_release(
    client: &mut impl GenericClient,
    claim: &Claim,
    code: &str,
) -> Result<(), QueueError> {
    let rows = client.query(RELEASE, &[&claim.id, &claim.token, &code])?;
    if rows.is_empty() {
        return Err(QueueError::ClaimLost);
    }
    Ok(())
}

/// The database clock, in milliseconds since the epoch (due times never use the worker's
/// clock).
pub fn work_clock(client: &mut impl GenericClient) -> Result<i64, QueueError> {
    Ok(client.query_one(CLOCK, &[])?.get(0))
}

/// Recovers expired claims and exhausted queued work (Q10).
pub fn work_recover_stale(
    client: &mut impl GenericClient,
    options: &QueueOptions,
) -> Result<Recovered, QueueError> {
    Ok(work_recover_stale_listing(client, options)?.0)
}

/// `work_recover_stale`, with the Agent works it failed, for their reconcilers'
/// after-recovery step (`Reconciler::after_stale_recovery`; SPEC E13).
pub fn work_recover_stale_listing(
    client: &mut impl GenericClient,
    options: &QueueOptions,
) -> Result<(Recovered, Vec<FailedWork>), QueueError> {
    let row = client.query_one(RECOVER_STALE, &[&options.max_attempts])?;
    let failed: Vec<RawFailedWork> = serde_json::from_value(row.get(4))
        .map_err(|e| malformed(format!("failed works of a recovery: {e}")))?;
    let failed = failed
        .into_iter()
        .map(|w| {
            Ok(FailedWork {
                operation: Operation::parse(&w.operation).ok_or_else(|| {
                    malformed(format!("operation {:?} of a recovered work", w.operation))
                })?,
                id: w.id,
                key: w.key,
                namespace_id: w.namespace_id,
                agent_id: w.agent_id,
            })
        })
        .collect::<Result<_, QueueError>>()?;
    Ok((
        Recovered {
            requeued: row.get(0),
            failed: row.get(1),
            failed_namespaces: row.get(2),
            failed_policies: row.get(3),
        },
        failed,
    ))
}

/// An Agent work that stale-claim recovery failed for good (SPEC Q10, E13).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedWork {
    pub operation: Operation,
    pub id: i64,
    pub key: String,
    pub namespace_id: String,
    pub agent_id: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFailedWork {
    operation: String,
    id: i64,
    key: String,
    namespace_id: String,
    agent_id: String,
}

/// The next recovery series of a credential withdrawal work (SPEC E12): key
/// `<request key>:recovery:<n>`, available after min(300 s, 30 s × 2^min(n−1, 10)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WithdrawalRecovery {
    pub n: u32,
    /// `<op>:recovery:<n>`, after `agent_revision:<rev>:credential_withdrawal:`.
    pub suffix: String,
    pub delay: Duration,
}

impl WithdrawalRecovery {
    /// The last series of a chain (SPEC E12).
    pub const LAST: u32 = 15;

    /// The series after the work keyed `key`; `None` past the last one, or for a key that is
    /// not a withdrawal's.
    pub fn after(key: &str) -> Option<WithdrawalRecovery> {
        let (_, rest) = key.split_once(":credential_withdrawal:")?;
        let (op, m) = match rest.split_once(":recovery:") {
            Some((op, m)) => (op, m.parse::<u32>().ok()?),
            None => (rest, 0),
        };
        let n = m + 1;
        if n > Self::LAST {
            return None;
        }
        let ms = (30_000u64 << (n - 1).min(10)).min(300_000);
        Some(WithdrawalRecovery {
            n,
            suffix: format!("{op}:recovery:{n}"),
            delay: Duration::from_millis(ms),
        })
    }
}

/// Enqueues `next`, the recovery series of the withdrawal work `work_id` (SPEC E12), when its
/// revision's first pending row needs an attempt; the new key, or `None` when nothing was
/// queued.
pub fn work_enqueue_withdrawal_recovery(
    client: &mut impl GenericClient,
    work_id: i64,
    next: &WithdrawalRecovery,
) -> Result<Option<String>, QueueError> {
    let row = client.query_opt(
        ENQUEUE_WITHDRAWAL_RECOVERY,
        &[&work_id, &next.suffix, &ms(next.delay)],
    )?;
    Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
}

/// In the transaction that ends the withdrawal work `work_id` for good: a fresh withdrawal of
/// the first pending row the pass never saw (a request that arrived while it ran found it
/// outstanding and queued nothing, SPEC E15), by that row's requester, when it needs an
/// attempt and no other withdrawal of the revision is outstanding. The new key, if any.
pub fn work_enqueue_withdrawal_followup(
    client: &mut impl GenericClient,
    work_id: i64,
    attempted: &[String],
) -> Result<Option<String>, QueueError> {
    let row = client.query_opt(ENQUEUE_WITHDRAWAL_FOLLOWUP, &[&work_id, &attempted])?;
    Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
}

/// Where `work_pending_count` stops counting: readiness stays a bounded query however large
/// the backlog (W5a); a count at the cap means "at least this many".
pub const PENDING_COUNT_CAP: i64 = 10_000;

/// Queued and claimed counts, each capped at `PENDING_COUNT_CAP`.
pub fn work_pending_count(client: &mut impl GenericClient) -> Result<Pending, QueueError> {
    let row = client.query_one(PENDING_COUNT, &[&PENDING_COUNT_CAP])?;
    Ok(Pending {
        queued: row.get(0),
        claimed: row.get(1),
        oldest_due_seconds: row.get(2),
    })
}

/// A work's state as the operator view says it (`occ.work_status.state`): `claimed` while a
/// lane holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkState {
    Queued,
    Claimed,
    Succeeded,
    FailedPermanent,
}

impl WorkState {
    pub const ALL: [WorkState; 4] = [
        WorkState::Queued,
        WorkState::Claimed,
        WorkState::Succeeded,
        WorkState::FailedPermanent,
    ];

    /// Parses the stored text; a value outside the view's states is corrupt data.
    pub fn parse(text: &str) -> Result<WorkState, QueueError> {
        WorkState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| malformed(format!("work state {text:?}")))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WorkState::Queued => "queued",
            WorkState::Claimed => "claimed",
            WorkState::Succeeded => "succeeded",
            WorkState::FailedPermanent => "failed_permanent",
        }
    }

    /// Whether the work ended (succeeded or failed for good).
    pub fn ended(self) -> bool {
        matches!(self, WorkState::Succeeded | WorkState::FailedPermanent)
    }
}

/// A row as the operator sees it (camelCase, like every operator answer).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkView {
    pub id: i64,
    pub key: String,
    pub operation: String,
    pub namespace_id: String,
    pub agent_id: Option<String>,
    pub revision_id: Option<String>,
    pub actor_id: String,
    pub state: WorkState,
    pub attempts: i32,
    pub reason_code: Option<String>,
    pub result_data: Option<Value>,
    pub created_at: String,
    pub available_at: String,
    pub completed_at: Option<String>,
    /// While the work is claimed: the worker process holding it (V29; none for a claim a
    /// worker of an earlier release took).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<ClaimHolder>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Value>,
    /// What an operator does next about a failed Agent stop or deletion (SPEC Z8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint_code: Option<&'static str>,
    /// `hint_code` as a sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<&'static str>,
}

/// The worker process holding a claim, as its `worker.started` line names it (W7), and since
/// when it holds the claim (by the database clock).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimHolder {
    pub worker_id: String,
    pub host: String,
    pub pid: i32,
    pub since: String,
}

/// SPEC Z8's table: a permanent outcome's code, the hint an operator is given, and that hint
/// as the sentence `admin work show` prints.
const HINTS: [(&str, &str, &str); 7] = [
    (
        "AUTHORIZATION_DENIED",
        "GRANT_AND_REPLAY",
        "grant the actor the permission it lacked, then run the same command again",
    ),
    (
        "ACTOR_REVOKED",
        "REPLAY_AS_CURRENT_OPERATOR",
        "the actor was revoked: run the same command again as a current operator",
    ),
    (
        "COMPUTE_DRIVER_MISMATCH",
        "SELECT_ORIGINAL_COMPUTE_DRIVER",
        "run a worker with the Compute Driver that deployed the Agent, then run the command again",
    ),
    (
        "CREDENTIAL_WITHDRAWAL_REQUIRES_RUNTIME_RETIREMENT",
        "DEPLOY_NEW_REVISION",
        "a running harness cannot drop its credential: deploy a new revision without it",
    ),
    (
        "CREDENTIAL_WITHDRAWAL_OWNERSHIP_CONFLICT",
        "FIX_DRIVER_AND_REPLAY",
        "fix the credential source's driver or the Compute Driver, then request the withdrawal again",
    ),
    (
        "CREDENTIAL_WITHDRAWAL_MISCONFIGURED",
        "FIX_DRIVER_AND_REPLAY",
        "fix the credential source's driver or the Compute Driver, then request the withdrawal again",
    ),
    (
        "CREDENTIAL_DELETION_UNSUPPORTED",
        "REMOVE_RUNTIME_CREDENTIALS_MANUALLY",
        "this Compute Driver cannot delete the Agent's runtime credentials: remove them by hand",
    ),
];

/// SPEC Z8: the hint code and sentence for a permanent outcome `code` of an Agent stop, an
/// Agent deletion or a credential withdrawal, when the table maps it; none for any other
/// operation or code.
fn hint(operation: Operation, code: &str) -> Option<(&'static str, &'static str)> {
    if !matches!(
        operation,
        Operation::AgentStop | Operation::AgentDelete | Operation::CredentialWithdrawal
    ) {
        return None;
    }
    HINTS
        .iter()
        .find(|(mapped, _, _)| *mapped == code)
        .map(|(_, hint, sentence)| (*hint, *sentence))
}

/// The hint code of `hint` (what `worker.completed` carries).
pub fn hint_code(operation: Operation, code: &str) -> Option<&'static str> {
    hint(operation, code).map(|(hint, _)| hint)
}

fn view(row: &postgres::Row, with_evidence: bool) -> Result<WorkView, QueueError> {
    Ok(WorkView {
        id: row.get(0),
        key: row.get(1),
        operation: row.get(2),
        namespace_id: row.get(3),
        agent_id: row.get(4),
        revision_id: row.get(5),
        actor_id: row.get(6),
        state: WorkState::parse(row.get(7))?,
        attempts: row.get(8),
        reason_code: row.get(9),
        result_data: row.get(10),
        created_at: row.get(11),
        available_at: row.get(12),
        completed_at: row.get(13),
        holder: match (row.get(14), row.get(15), row.get(16), row.get(17)) {
            (Some(worker_id), Some(host), Some(pid), Some(since)) => Some(ClaimHolder {
                worker_id,
                host,
                pid,
                since,
            }),
            _ => None,
        },
        evidence: if with_evidence { row.get(18) } else { None },
        hint_code: None,
        hint: None,
    }
    .with_hint())
}

impl WorkView {
    /// The hint of a work that failed for good with a mapped code (SPEC Z8).
    fn with_hint(mut self) -> WorkView {
        let hint = match (
            self.state == WorkState::FailedPermanent,
            Operation::parse(&self.operation),
            &self.reason_code,
        ) {
            (true, Some(operation), Some(code)) => hint(operation, code),
            _ => None,
        };
        self.hint_code = hint.map(|(code, _)| code);
        self.hint = hint.map(|(_, sentence)| sentence);
        self
    }
}

/// Which rows `work_list` returns: every filter is optional, the limit is not.
#[derive(Clone, Debug, Default)]
pub struct WorkFilter<'a> {
    pub state: Option<&'a str>,
    pub namespace_id: Option<&'a str>,
    pub operation: Option<&'a str>,
    /// An Agent id or name.
    pub agent: Option<&'a str>,
    /// Created at or after this RFC 3339 time.
    pub since: Option<&'a str>,
    /// Created within this PostgreSQL interval (`30 minutes`) of the database clock.
    pub age: Option<&'a str>,
    /// Only rows with a smaller id: the cursor of the page before.
    pub before: Option<i64>,
    pub limit: i64,
}

/// Lists rows newest first, by `filter`.
pub fn work_list(
    client: &mut impl GenericClient,
    filter: &WorkFilter,
) -> Result<Vec<WorkView>, QueueError> {
    let f = filter;
    client
        .query(
            LIST,
            &[
                &f.state,
                &f.namespace_id,
                &f.operation,
                &f.agent,
                &f.since,
                &f.age,
                &f.before,
                &f.limit,
            ],
        )?
        .iter()
        .map(|r| view(r, false))
        .collect()
}

/// One row by key, with its attempt evidence.
pub fn work_show(
    client: &mut impl GenericClient,
    key: &str,
) -> Result<Option<WorkView>, QueueError> {
    client
        .query_opt(SHOW, &[&key])?
        .map(|r| view(&r, true))
        .transpose()
}
