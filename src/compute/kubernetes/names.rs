//! Deterministic Kubernetes names and label values derived from occ ids.
//!
//! This module owns how an id becomes a DNS-1123 label (namespace and object names) or a label
//! value, and the ownership label keys every driver object carries. A name is a pure function
//! of its inputs: the same id always yields the same name, so a pass that runs again after a
//! lost lease finds the objects an earlier pass created. When sanitising changes an id or it is
//! too long, the name ends in `-` and 10 hex characters of the SHA-256 of the unsanitised
//! input, so distinct ids never share a name. It must never produce a name Kubernetes would
//! reject, and never depend on anything but its arguments.

use sha2::{Digest, Sha256};

/// The standard label naming the controller that manages an object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The value of `LABEL_MANAGED_BY` on every object the driver creates.
pub const MANAGED_BY: &str = "occ-worker";
/// The installation that owns an object; the driver never touches an object without it.
pub const LABEL_INSTALLATION: &str = "occ.installation";
/// The occ Namespace id an object belongs to.
pub const LABEL_NAMESPACE: &str = "occ.namespace";
/// The Agent id an object belongs to.
pub const LABEL_AGENT: &str = "occ.agent";
/// The AgentRevision number an object belongs to.
pub const LABEL_REVISION: &str = "occ.revision";
/// What a Pod is to its Agent: `harness` (a dedicated Harness) or `gateway`.
pub const LABEL_COMPONENT: &str = "occ.component";

/// The longest DNS-1123 label and the longest label value.
pub const MAX_LEN: usize = 63;
/// How many hex characters of the SHA-256 the suffix carries.
const HASH_LEN: usize = 10;

/// The Kubernetes namespace of an occ Namespace: `prefix` + id, as a DNS-1123 label.
pub fn namespace_name(prefix: &str, namespace_id: &str) -> String {
    dns_label(&format!("{prefix}{namespace_id}"))
}

/// The base name of an Agent's objects (ServiceAccount, Service, gateway Deployment):
/// `agent-` + id. The prefix makes it a valid DNS-1035 label too, as Service names must be.
pub fn agent_object_name(agent_id: &str) -> String {
    dns_label(&format!("agent-{agent_id}"))
}

/// The name of a revision's objects (its dedicated Harness Deployment and Service): `agent-<id>-r<revision>`.
pub fn revision_object_name(agent_id: &str, revision: i32) -> String {
    dns_label(&format!("agent-{agent_id}-r{revision}"))
}

/// A label value for `s`: at most 63 characters of `[A-Za-z0-9._-]`, beginning and ending
/// with an alphanumeric character (or empty, when `s` is).
pub fn label_value(s: &str) -> String {
    let sanitised: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = sanitised.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed == s && s.len() <= MAX_LEN {
        return s.to_string();
    }
    with_suffix(trimmed, s, |c| !c.is_ascii_alphanumeric())
}

/// `s` as a DNS-1123 label: lower-case alphanumerics and `-`, beginning and ending with an
/// alphanumeric, at most 63 characters.
pub fn dns_label(s: &str) -> String {
    let sanitised: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = sanitised.trim_matches('-');
    if trimmed == s && !s.is_empty() && s.len() <= MAX_LEN {
        return s.to_string();
    }
    with_suffix(trimmed, s, |c| c == '-')
}

/// Whether `s` is a valid DNS-1123 label.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LEN
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a valid label value.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= MAX_LEN
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// `base` cut to leave room for the suffix, stripped of trailing characters `strip` rejects,
/// then `-` and the hash of `original` (the hash alone when nothing of `base` is left).
fn with_suffix(base: &str, original: &str, strip: impl Fn(char) -> bool) -> String {
    let hash = short_hash(original);
    // Sanitised text is ASCII, so byte offsets are character boundaries.
    let room = MAX_LEN - HASH_LEN - 1;
    let cut = base[..base.len().min(room)].trim_end_matches(strip);
    if cut.is_empty() {
        hash
    } else {
        format!("{cut}-{hash}")
    }
}

/// The first `HASH_LEN` lower-case hex characters of the SHA-256 of `s`.
fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex.truncate(HASH_LEN);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "0b6f7c1e-9a8d-4c2b-8e3f-5d4a3b2c1d0e";

    #[test]
    fn valid_ids_are_kept_verbatim() {
        assert_eq!(namespace_name("occ-", UUID), format!("occ-{UUID}"));
        assert_eq!(agent_object_name(UUID), format!("agent-{UUID}"));
        assert_eq!(revision_object_name(UUID, 3), format!("agent-{UUID}-r3"));
        assert_eq!(label_value(UUID), UUID);
        assert_eq!(label_value("Codex_1.2.0"), "Codex_1.2.0");
        assert_eq!(label_value(""), "");
    }

    #[test]
    fn sanitised_names_carry_the_hash_of_the_original() {
        let name = namespace_name("occ-", "Team_A");
        assert_eq!(name, format!("occ-team-a-{}", short_hash("occ-Team_A")));
        assert!(is_dns_label(&name));
        // Differing only in case or in a replaced character still gives distinct names.
        assert_ne!(namespace_name("occ-", "team-a"), name);
        assert_ne!(namespace_name("occ-", "Team.A"), name);
        assert_eq!(namespace_name("occ-", "team-a"), "occ-team-a");
    }

    #[test]
    fn long_names_are_truncated_with_a_hash() {
        let long = "x".repeat(100);
        let name = agent_object_name(&long);
        assert_eq!(name.len(), MAX_LEN);
        assert!(is_dns_label(&name));
        assert!(name.starts_with("agent-xxx"));
        assert_eq!(
            &name[MAX_LEN - HASH_LEN..],
            short_hash(&format!("agent-{long}"))
        );
    }

    #[test]
    fn ids_differing_after_the_truncation_point_do_not_collide() {
        let a = format!("{}a", "y".repeat(80));
        let b = format!("{}b", "y".repeat(80));
        assert_ne!(namespace_name("occ-", &a), namespace_name("occ-", &b));
        assert_ne!(agent_object_name(&a), agent_object_name(&b));
        assert_ne!(revision_object_name(&a, 1), revision_object_name(&a, 2));
        assert_ne!(label_value(&a), label_value(&b));
        assert_eq!(label_value(&a).len(), MAX_LEN);
    }

    #[test]
    fn names_are_stable() {
        // Pinned: a changed algorithm would orphan every object created before it.
        assert_eq!(
            namespace_name("occ-", "Team_A"),
            namespace_name("occ-", "Team_A")
        );
        assert_eq!(short_hash(""), "e3b0c44298");
    }

    #[test]
    fn every_output_is_valid() {
        let inputs = [
            "",
            "-",
            "---",
            "A",
            "_x_",
            "ünïcödé",
            "a.b.c",
            "-leading-and-trailing-",
            &"Z-".repeat(50),
            &"9".repeat(70),
        ];
        for input in inputs {
            assert!(is_dns_label(&namespace_name("occ-", input)), "{input:?}");
            assert!(is_dns_label(&agent_object_name(input)), "{input:?}");
            assert!(
                is_dns_label(&revision_object_name(input, i32::MAX)),
                "{input:?}"
            );
            assert!(is_dns_label(&dns_label(input)), "{input:?}");
            assert!(is_label_value(&label_value(input)), "{input:?}");
        }
    }

    #[test]
    fn label_values_replace_invalid_characters() {
        let value = label_value("a b/c");
        assert_eq!(value, format!("a-b-c-{}", short_hash("a b/c")));
        assert!(is_label_value(&label_value("-x-")));
        assert!(label_value("-x-").starts_with("x-"));
    }
}
