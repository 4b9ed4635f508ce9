//! IAM on real tables (SPEC section 1, N2, N5): the Rust model (`iam::load` +
//! `Model::authorize`) decides, and the SQL `occ.authorized` / `occ.authorize` used by
//! admission and by every pass (`iam::decide`) agree with it on every case, evidence included.

use crate::support::{insert_namespace, TestDb};
use occ_worker::iam::{self, Action, Request, Resource, ResourceKind};
use postgres::Client;

/// admin: installation-admin. alice: namespace-admin of n1. bob: viewer everywhere and
/// agent-operator on agent n1/a1. Restrictions: alice may not delete agent n1/a2; nobody may
/// deploy in n2.
fn world() -> (TestDb, Client) {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "n1", "ready");
    insert_namespace(&mut c, "n2", "ready");
    c.batch_execute(
        "INSERT INTO occ.identities (id, kind) VALUES ('alice', 'user'), ('bob', 'user');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id)
             VALUES ('alice', 'namespace-admin', 'namespace', 'n1');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind) VALUES ('bob', 'viewer', 'installation');
         INSERT INTO occ.iam_bindings (principal_id, role_id, scope_kind, namespace_id, resource_kind, resource_id)
             VALUES ('bob', 'agent-operator', 'resource', 'n1', 'agent', 'a1');
         INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id, resource_kind, resource_id)
             VALUES ('alice', '{delete}', 'resource', 'n1', 'agent', 'a2');
         INSERT INTO occ.iam_restrictions (principal_id, actions, scope_kind, namespace_id)
             VALUES (NULL, '{deploy}', 'namespace', 'n2');",
    )
    .unwrap();
    (db, c)
}

fn agent(ns: &str, id: &str) -> Resource {
    Resource::owned(ResourceKind::Agent, ns, id)
}

/// (principal, action, resource, allowed, reason)
fn cases() -> Vec<(&'static str, Action, Resource, bool, &'static str)> {
    use Action::*;
    vec![
        (
            "admin",
            Create,
            Resource::namespaces_in("inst"),
            true,
            "ALLOWED",
        ),
        (
            "admin",
            Administer,
            Resource::installation("inst"),
            true,
            "ALLOWED",
        ),
        (
            "alice",
            Create,
            Resource::namespaces_in("inst"),
            false,
            "NO_MATCHING_BINDING",
        ),
        (
            "alice",
            Administer,
            Resource::installation("inst"),
            false,
            "NO_MATCHING_BINDING",
        ),
        ("alice", Delete, Resource::namespace("n1"), true, "ALLOWED"),
        (
            "alice",
            Delete,
            Resource::namespace("n2"),
            false,
            "NO_MATCHING_BINDING",
        ),
        ("alice", Delete, agent("n1", "a1"), true, "ALLOWED"),
        ("alice", Delete, agent("n1", "a2"), false, "RESTRICTED"),
        ("bob", Operate, agent("n1", "a1"), true, "ALLOWED"),
        (
            "bob",
            Operate,
            agent("n1", "a3"),
            false,
            "NO_MATCHING_BINDING",
        ),
        (
            "bob",
            Operate,
            agent("n2", "a1"),
            false,
            "NO_MATCHING_BINDING",
        ),
        (
            "bob",
            Operate,
            Resource::owned(ResourceKind::Configuration, "n1", "a1"),
            false,
            "NO_MATCHING_BINDING",
        ),
        ("bob", Read, Resource::namespace("n2"), true, "ALLOWED"),
        (
            "bob",
            Delete,
            Resource::namespace("n1"),
            false,
            "NO_MATCHING_BINDING",
        ),
        ("admin", Deploy, agent("n2", "x"), false, "RESTRICTED"),
        ("admin", Deploy, agent("n1", "x"), true, "ALLOWED"),
        (
            "ghost",
            Read,
            Resource::installation("inst"),
            false,
            "NO_IDENTITY",
        ),
    ]
}

fn sql_decision(c: &mut Client, principal: &str, action: Action, r: &Resource) -> (bool, String) {
    let row = c
        .query_one(
            "SELECT occ.authorized($1, $2, $3, $4, $5), occ.authorize($1, $2, $3, $4, $5) ->> 'reason'",
            &[&principal, &action.as_str(), &r.kind.as_str(), &r.id, &r.namespace_id],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn scopes_role_kinds_and_restrictions_decide_and_sql_agrees() {
    let (_db, mut c) = world();
    let policy = iam::load(&mut c).unwrap();
    for (principal, action, resource, allowed, reason) in cases() {
        let d = policy.authorize(&Request::new(principal, action, resource.clone()));
        let what = format!("{principal} {} {resource:?}", action.as_str());
        assert_eq!((d.allowed, d.reason), (allowed, reason), "rust: {what}");
        assert_eq!(
            sql_decision(&mut c, principal, action, &resource),
            (allowed, reason.to_string()),
            "sql: {what}"
        );
    }
}

#[test]
fn decisions_carry_binding_role_and_restriction_evidence() {
    let (_db, mut c) = world();
    let policy = iam::load(&mut c).unwrap();
    let d = policy.authorize(&Request::new("alice", Action::Delete, agent("n1", "a2")));
    assert_eq!(d.evidence.identity_id.as_deref(), Some("alice"));
    assert_eq!(d.evidence.role_ids, vec!["namespace-admin".to_string()]);
    assert_eq!(d.evidence.binding_ids.len(), 1);
    assert_eq!(d.evidence.restriction_ids.len(), 1);
    let sql: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT occ.authorize('alice', 'delete', 'agent', 'a2', 'n1')",
        &[],
    );
    assert_eq!(
        sql["evidence"]["bindingIds"],
        serde_json::json!(d.evidence.binding_ids)
    );
    assert_eq!(
        sql["evidence"]["restrictionIds"],
        serde_json::json!(d.evidence.restriction_ids)
    );
}

#[test]
fn a_revoked_identity_has_no_access_and_its_bindings_are_gone() {
    let (_db, mut c) = world();
    let v: serde_json::Value =
        crate::support::one(&mut c, "SELECT occ.identity_revoke('admin', 'alice')", &[]);
    assert_eq!(v["revoked"], true);
    let policy = iam::load(&mut c).unwrap();
    assert!(!policy.identity_exists("alice"));
    let d = policy.authorize(&Request::new(
        "alice",
        Action::Delete,
        Resource::namespace("n1"),
    ));
    assert_eq!((d.allowed, d.reason), (false, "NO_IDENTITY"));
    assert_eq!(
        sql_decision(&mut c, "alice", Action::Delete, &Resource::namespace("n1")),
        (false, "NO_IDENTITY".to_string())
    );
    let left: i64 = crate::support::one(
        &mut c,
        "SELECT (SELECT count(*) FROM occ.iam_bindings WHERE principal_id = 'alice')
                  + (SELECT count(*) FROM occ.iam_restrictions WHERE principal_id = 'alice')",
        &[],
    );
    assert_eq!(left, 0);
}

#[test]
fn identity_and_grant_administration_needs_installation_administer() {
    let (_db, mut c) = world();
    let e = c
        .query_one("SELECT occ.identity_create('alice', 'carol')", &[])
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("alice may not create identities"));
    let e = c
        .query_one(
            "SELECT occ.binding_grant('alice', 'alice', 'installation-admin', 'installation')",
            &[],
        )
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    let v: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'namespace:n1')",
        &[],
    );
    assert_eq!(v["created"], true);
    let again: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'namespace:n1')",
        &[],
    );
    assert_eq!(
        (again["created"].clone(), again["bindingId"].clone()),
        (false.into(), v["bindingId"].clone())
    );
    c.query_one(
        "SELECT occ.binding_revoke('admin', 'bob', 'viewer', 'namespace:n1')",
        &[],
    )
    .unwrap();
    let e = c
        .query_one(
            "SELECT occ.binding_revoke('admin', 'admin', 'installation-admin', 'installation')",
            &[],
        )
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("last installation administrator"));
    let e = c
        .query_one(
            "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'secret:n1/nope')",
            &[],
        )
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("no secret nope"));
}

#[test]
fn revoking_a_non_administrator_is_allowed_but_never_the_last_administrator() {
    let (_db, mut c) = world();
    c.query_one("SELECT occ.identity_revoke('admin', 'bob')", &[])
        .unwrap();
    let e = c
        .query_one("SELECT occ.identity_revoke('admin', 'admin')", &[])
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("last installation administrator"));
}

/// Groups: `ops` (carol, dave) is namespace-admin of n1; `interns` (dave) may not delete in n1.
fn group_world() -> (TestDb, Client) {
    let (db, mut c) = world();
    c.batch_execute(
        "INSERT INTO occ.identities (id, kind) VALUES ('carol', 'user'), ('dave', 'user');",
    )
    .unwrap();
    for sql in [
        "SELECT occ.group_create('admin', 'ops')",
        "SELECT occ.group_create('admin', 'interns')",
        "SELECT occ.group_add_member('admin', 'ops', 'carol')",
        "SELECT occ.group_add_member('admin', 'ops', 'dave')",
        "SELECT occ.group_add_member('admin', 'interns', 'dave')",
        "SELECT occ.binding_grant('admin', 'group:ops', 'namespace-admin', 'namespace:n1')",
    ] {
        c.query_one(sql, &[]).unwrap();
    }
    c.batch_execute(
        "INSERT INTO occ.iam_restrictions (group_id, actions, scope_kind, namespace_id)
             VALUES ('interns', '{delete}', 'namespace', 'n1');",
    )
    .unwrap();
    (db, c)
}

/// Rust and SQL decide `principal action resource` the same way; returns the Rust decision.
fn decide_both(c: &mut Client, principal: &str, action: Action, r: Resource) -> iam::Decision {
    let policy = iam::load(c).unwrap();
    let d = policy.authorize(&Request::new(principal, action, r.clone()));
    let sql: serde_json::Value = crate::support::one(
        c,
        "SELECT occ.authorize($1, $2, $3, $4, $5)",
        &[
            &principal,
            &action.as_str(),
            &r.kind.as_str(),
            &r.id,
            &r.namespace_id,
        ],
    );
    let what = format!("{principal} {} {r:?}", action.as_str());
    assert_eq!(sql["allowed"], d.allowed, "sql allowed: {what}");
    assert_eq!(sql["reason"], d.reason, "sql reason: {what}");
    assert_eq!(
        sql["evidence"]["groupIds"],
        serde_json::json!(d.evidence.group_ids),
        "sql groups: {what}"
    );
    assert_eq!(
        sql["evidence"]["bindingIds"],
        serde_json::json!(d.evidence.binding_ids),
        "sql bindings: {what}"
    );
    assert_eq!(
        sql["evidence"]["restrictionIds"],
        serde_json::json!(d.evidence.restriction_ids),
        "sql restrictions: {what}"
    );
    assert_eq!(
        sql["evidence"]["roleIds"],
        serde_json::json!(d.evidence.role_ids),
        "sql roles: {what}"
    );
    assert_eq!(
        sql_decision(c, principal, action, &r),
        (d.allowed, d.reason.to_string()),
        "sql authorized: {what}"
    );
    d
}

#[test]
fn a_group_binding_allows_its_members_and_the_evidence_names_the_group() {
    let (_db, mut c) = group_world();
    let d = decide_both(&mut c, "carol", Action::Deploy, agent("n1", "a1"));
    assert_eq!((d.allowed, d.reason), (true, "ALLOWED"));
    assert_eq!(d.evidence.identity_id.as_deref(), Some("carol"));
    assert_eq!(d.evidence.group_ids, ["ops"]);
    assert_eq!(d.evidence.role_ids, ["namespace-admin"]);
    assert_eq!(d.evidence.binding_ids.len(), 1);
    // The binding is scoped: nothing in n2, nothing for a non-member.
    let d = decide_both(&mut c, "carol", Action::Operate, agent("n2", "a1"));
    assert_eq!((d.allowed, d.reason), (false, "NO_MATCHING_BINDING"));
    assert!(d.evidence.group_ids.is_empty());
    let d = decide_both(&mut c, "bob", Action::Operate, agent("n1", "a2"));
    assert_eq!((d.allowed, d.reason), (false, "NO_MATCHING_BINDING"));
    // Admission (SQL) honours the group binding too.
    let v: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT to_jsonb(occ.namespace_delete('carol', 'n1'))",
        &[],
    );
    assert_eq!(v["status"], "deleting");
}

#[test]
fn a_group_restriction_denies_its_members_only() {
    let (_db, mut c) = group_world();
    let d = decide_both(&mut c, "dave", Action::Delete, agent("n1", "a1"));
    assert_eq!((d.allowed, d.reason), (false, "RESTRICTED"));
    assert_eq!(d.evidence.group_ids, ["interns", "ops"]);
    assert_eq!(d.evidence.restriction_ids.len(), 1);
    let d = decide_both(&mut c, "dave", Action::Deploy, agent("n1", "a1"));
    assert_eq!((d.allowed, d.reason), (true, "ALLOWED"));
    assert_eq!(d.evidence.group_ids, ["ops"]);
    let d = decide_both(&mut c, "carol", Action::Delete, agent("n1", "a1"));
    assert_eq!((d.allowed, d.reason), (true, "ALLOWED"));
    // The everyone-restriction on n2 still applies to group members.
    let d = decide_both(&mut c, "carol", Action::Deploy, agent("n2", "x"));
    assert_eq!((d.reason, d.evidence.group_ids.len()), ("RESTRICTED", 0));
    let d = decide_both(&mut c, "admin", Action::Deploy, agent("n2", "x"));
    assert_eq!((d.reason, d.evidence.group_ids.len()), ("RESTRICTED", 0));
}

#[test]
fn removing_a_member_or_the_identity_revokes_what_the_group_granted() {
    let (_db, mut c) = group_world();
    c.query_one(
        "SELECT occ.group_remove_member('admin', 'ops', 'carol')",
        &[],
    )
    .unwrap();
    let d = decide_both(&mut c, "carol", Action::Deploy, agent("n1", "a1"));
    assert_eq!((d.allowed, d.reason), (false, "NO_MATCHING_BINDING"));
    let e = c
        .query_one(
            "SELECT occ.group_remove_member('admin', 'ops', 'carol')",
            &[],
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(&postgres::error::SqlState::NO_DATA_FOUND));
    // Revoking an identity removes its memberships with it.
    c.query_one("SELECT occ.identity_revoke('admin', 'dave')", &[])
        .unwrap();
    let members: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.iam_group_members WHERE identity_id = 'dave'",
        &[],
    );
    assert_eq!(members, 0);
    let d = decide_both(&mut c, "dave", Action::Deploy, agent("n1", "a1"));
    assert_eq!(d.reason, "NO_IDENTITY");
    // Revoking the group's binding by `group:ID` works like an identity's.
    c.query_one("SELECT occ.group_add_member('admin', 'ops', 'carol')", &[])
        .unwrap();
    assert!(decide_both(&mut c, "carol", Action::Deploy, agent("n1", "a1")).allowed);
    c.query_one(
        "SELECT occ.binding_revoke('admin', 'group:ops', 'namespace-admin', 'namespace:n1')",
        &[],
    )
    .unwrap();
    assert!(!decide_both(&mut c, "carol", Action::Deploy, agent("n1", "a1")).allowed);
}

#[test]
fn group_administration_needs_installation_administer_and_is_audited() {
    let (_db, mut c) = group_world();
    for sql in [
        "SELECT occ.group_create('carol', 'rogue')",
        "SELECT occ.group_add_member('carol', 'ops', 'bob')",
        "SELECT occ.group_remove_member('carol', 'ops', 'dave')",
        "SELECT occ.binding_grant('carol', 'group:ops', 'installation-admin', 'installation')",
    ] {
        let e = c.query_one(sql, &[]).unwrap_err();
        assert_eq!(
            e.code(),
            Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}"
        );
    }
    let e = c
        .query_one(
            "SELECT occ.binding_grant('admin', 'group:nope', 'viewer', 'installation')",
            &[],
        )
        .unwrap_err();
    assert!(e.as_db_error().unwrap().message().contains("no group nope"));
    let again: serde_json::Value = crate::support::one(
        &mut c,
        "SELECT occ.binding_grant('admin', 'group:ops', 'namespace-admin', 'namespace:n1')",
        &[],
    );
    assert_eq!(again["created"], false);
    assert_eq!(again["groupId"], "ops");
    let actions: Vec<String> = c
        .query(
            "SELECT action FROM occ.audit_events WHERE resource_kind IN ('iam_group', 'iam_binding')
             ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        actions,
        [
            "openclaw.iam.groups.create",
            "openclaw.iam.groups.create",
            "openclaw.iam.groups.add_member",
            "openclaw.iam.groups.add_member",
            "openclaw.iam.groups.add_member",
            "openclaw.iam.bindings.grant",
        ]
    );
    // An installation administrator through a group is not the last one while `admin` is
    // direct; once it is the only one, its membership cannot be removed.
    c.query_one("SELECT occ.group_create('admin', 'root')", &[])
        .unwrap();
    c.query_one("SELECT occ.group_add_member('admin', 'root', 'carol')", &[])
        .unwrap();
    c.query_one(
        "SELECT occ.binding_grant('admin', 'group:root', 'installation-admin', 'installation')",
        &[],
    )
    .unwrap();
    c.query_one(
        "SELECT occ.binding_revoke('carol', 'admin', 'installation-admin', 'installation')",
        &[],
    )
    .unwrap();
    let e = c
        .query_one(
            "SELECT occ.group_remove_member('carol', 'root', 'carol')",
            &[],
        )
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("last installation administrator"));
}

// SPEC §1: revoking the only member of the group that holds the only installation-admin
// binding would leave nobody to administer the installation; it is refused and rolled back.
#[test]
fn revoking_the_last_administrator_through_a_group_is_refused() {
    let (_db, mut c) = world();
    c.query_one("SELECT occ.identity_create('admin', 'dave')", &[])
        .unwrap();
    c.query_one("SELECT occ.group_create('admin', 'ops')", &[])
        .unwrap();
    c.query_one("SELECT occ.group_add_member('admin', 'ops', 'dave')", &[])
        .unwrap();
    c.query_one(
        "SELECT occ.binding_grant('admin', 'group:ops', 'installation-admin', 'installation')",
        &[],
    )
    .unwrap();
    c.query_one(
        "SELECT occ.binding_revoke('dave', 'admin', 'installation-admin', 'installation')",
        &[],
    )
    .unwrap();
    c.query_one("SELECT occ.identity_revoke('dave', 'admin')", &[])
        .expect("admin is no longer needed: dave administers through ops");
    let e = c
        .query_one("SELECT occ.identity_revoke('dave', 'dave')", &[])
        .unwrap_err();
    assert!(e
        .as_db_error()
        .unwrap()
        .message()
        .contains("last installation administrator"));
    let still: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.identities WHERE id = 'dave'",
        &[],
    );
    assert_eq!(still, 1, "the refused revocation was rolled back");
}

#[test]
fn the_admin_cli_manages_groups_and_grants_to_them() {
    let (db, mut c) = world();
    let admin = |args: &[&str]| {
        let mut all = vec!["admin"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--actor", "admin", "--json"]);
        let out = crate::support::worker_command(&all, &[("OCC_DATABASE_URL", db.url.clone())])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{all:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(admin(&["group", "create", "ops"])["id"], "ops");
    assert_eq!(admin(&["group", "add-member", "ops", "bob"])["added"], true);
    let grant = admin(&[
        "grant",
        "group:ops",
        "namespace-admin",
        "--scope",
        "namespace:n2",
    ]);
    assert_eq!(
        (grant["groupId"].clone(), grant["created"].clone()),
        ("ops".into(), true.into())
    );
    assert!(decide_both(&mut c, "bob", Action::Delete, Resource::namespace("n2")).allowed);
    admin(&["group", "remove-member", "ops", "bob"]);
    assert!(!decide_both(&mut c, "bob", Action::Delete, Resource::namespace("n2")).allowed);
    admin(&[
        "revoke",
        "group:ops",
        "namespace-admin",
        "--scope",
        "namespace:n2",
    ]);
    let left: i64 = crate::support::one(
        &mut c,
        "SELECT count(*) FROM occ.iam_bindings WHERE group_id = 'ops'",
        &[],
    );
    assert_eq!(left, 0);
}

/// A pass decides through `iam::decide` (one statement, `occ.authorize` for
/// each request) instead of loading the whole policy. Its decisions, evidence order included
/// (roles by first matching binding, groups bytewise), are exactly the Rust model's, so denial
/// audit rows do not change.
#[test]
fn decide_gives_the_models_decisions_and_evidence_in_one_statement() {
    let (_db, mut c) = group_world();
    // erin matches through two groups whose byte order and dictionary order differ; bob's read
    // of n1/a1 matches two roles whose binding order is not their name order.
    c.batch_execute("INSERT INTO occ.identities (id, kind) VALUES ('erin', 'user');")
        .unwrap();
    for sql in [
        "SELECT occ.group_create('admin', 'ops-b')",
        "SELECT occ.group_create('admin', 'opsa')",
        "SELECT occ.group_add_member('admin', 'opsa', 'erin')",
        "SELECT occ.group_add_member('admin', 'ops-b', 'erin')",
        "SELECT occ.binding_grant('admin', 'group:opsa', 'viewer', 'installation')",
        "SELECT occ.binding_grant('admin', 'group:ops-b', 'agent-operator', 'namespace:n1')",
    ] {
        c.query_one(sql, &[]).unwrap();
    }
    c.batch_execute(
        "INSERT INTO occ.iam_restrictions (group_id, actions, scope_kind, namespace_id)
             VALUES ('opsa', '{operate}', 'namespace', 'n1');",
    )
    .unwrap();
    let mut requests: Vec<Request> = cases()
        .into_iter()
        .map(|(p, a, r, _, _)| Request::new(p, a, r))
        .collect();
    for principal in ["carol", "dave", "erin", "bob", "ghost"] {
        for action in [
            Action::Read,
            Action::Operate,
            Action::Delete,
            Action::Deploy,
        ] {
            requests.push(Request::new(principal, action, agent("n1", "a1")));
            requests.push(Request::new(principal, action, agent("n2", "a1")));
        }
    }
    let model = iam::load(&mut c).unwrap();
    let decided = iam::decide(&mut c, &requests, &["ghost", "admin"]).unwrap();
    for r in &requests {
        assert_eq!(decided.authorize(r), model.authorize(r), "{r:?}");
    }
    let read = |p: &str| decided.authorize(&Request::new(p, Action::Read, agent("n1", "a1")));
    assert_eq!(read("bob").evidence.role_ids, ["viewer", "agent-operator"]);
    let erin = decided.authorize(&Request::new("erin", Action::Operate, agent("n1", "a1")));
    assert_eq!((erin.allowed, erin.reason), (false, "RESTRICTED"));
    assert_eq!(erin.evidence.group_ids, ["ops-b", "opsa"]);
    assert_eq!(read("erin").evidence.role_ids, ["viewer", "agent-operator"]);
    // The identities asked about: every principal, and the extra ones.
    assert!(decided.identity_exists("admin") && decided.identity_exists("erin"));
    assert!(!decided.identity_exists("ghost"));
    assert_eq!(
        decided.identity("bob").map(|i| i.kind),
        Some(occ_worker::iam::IdentityKind::User)
    );
    // Asking nothing is one statement that decides nothing.
    assert!(!iam::decide(&mut c, &[], &[])
        .unwrap()
        .identity_exists("admin"));
}
