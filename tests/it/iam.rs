//! IAM on real tables (SPEC section 1, N2, N5): `iam::load` + `Policy::authorize` decide, and
//! the SQL `occ.authorized` / `occ.authorize` used by admission agree on every case.

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
    let sql: serde_json::Value = c
        .query_one(
            "SELECT occ.authorize('alice', 'delete', 'agent', 'a2', 'n1')",
            &[],
        )
        .unwrap()
        .get(0);
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
    let v: serde_json::Value = c
        .query_one("SELECT occ.identity_revoke('admin', 'alice')", &[])
        .unwrap()
        .get(0);
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
    let left: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM occ.iam_bindings WHERE principal_id = 'alice')
                  + (SELECT count(*) FROM occ.iam_restrictions WHERE principal_id = 'alice')",
            &[],
        )
        .unwrap()
        .get(0);
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
    let v: serde_json::Value = c
        .query_one(
            "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'namespace:n1')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(v["created"], true);
    let again: serde_json::Value = c
        .query_one(
            "SELECT occ.binding_grant('admin', 'bob', 'viewer', 'namespace:n1')",
            &[],
        )
        .unwrap()
        .get(0);
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
