//! `deploy/observability/`, checked against the worker it watches: every metric the Grafana
//! dashboard and the Prometheus alert rules query, every label they match, group by or print,
//! and every label value they match, is one a live worker's `/metrics` exports; every panel
//! and alert is explained in docs/operating.md. So the files cannot drift from the code.

use crate::support::{
    free_port, http_get_text, insert_namespace, wait_for, worker_env, TestDb, WorkerProcess,
};
use occ_worker::queue::{work_enqueue, NewWork};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/observability")
}

/// Labels Prometheus adds to every scraped series (the target's), not the worker.
const TARGET_LABELS: [&str; 4] = ["instance", "job", "namespace", "pod"];

/// The PromQL functions and aggregations the files may call.
const FUNCTIONS: [&str; 14] = [
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "rate",
    "increase",
    "deriv",
    "histogram_quantile",
    "absent_over_time",
    "absent",
    "max_over_time",
    "min_over_time",
];

/// The aggregations, which may take their grouping before their argument.
const AGGREGATIONS: [&str; 6] = ["sum", "max", "min", "avg", "count", "topk"];

/// What one exposition says: metric name → label name → the values seen.
type Exported = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Parses the text format's samples (`name{a="x",b="y"} value`).
fn exported(text: &str) -> Exported {
    let mut out = Exported::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, _) = line.rsplit_once(' ').expect(line);
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let entry = out.entry(name.to_string()).or_default();
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (label, value) = pair.split_once('=').expect(pair);
            entry
                .entry(label.to_string())
                .or_default()
                .insert(value.trim_matches('"').to_string());
        }
    }
    out
}

/// One matcher of a selector: label, operator, value.
#[derive(Debug)]
struct Matcher {
    label: String,
    op: String,
    value: String,
}

/// What an expression names: metric selectors with their matchers, the labels it groups
/// by, and the functions it calls.
#[derive(Debug, Default)]
struct Query {
    selectors: Vec<(String, Vec<Matcher>)>,
    grouping: BTreeSet<String>,
    functions: BTreeSet<String>,
}

/// Enough of PromQL for the files' expressions: identifiers are functions when a `(`
/// follows, grouping clauses when `by`/`without`/`on`/`ignoring`, keywords, or metric names;
/// ranges and numbers are skipped; a `{…}` after a metric name is its matchers.
fn parse(expr: &str) -> Query {
    let chars: Vec<char> = expr.chars().collect();
    let mut q = Query::default();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            skip_ws(&mut i);
            let next = chars.get(i).copied();
            if matches!(word.as_str(), "by" | "without" | "on" | "ignoring") {
                assert_eq!(next, Some('('), "{word} without labels in {expr}");
                let close = i + chars[i..].iter().position(|&c| c == ')').expect(expr);
                let labels: String = chars[i + 1..close].iter().collect();
                q.grouping
                    .extend(labels.split(',').map(|l| l.trim().to_string()));
                i = close + 1;
            } else if matches!(word.as_str(), "and" | "or" | "unless" | "bool" | "offset") {
            } else if next == Some('(') || AGGREGATIONS.contains(&word.as_str()) {
                q.functions.insert(word);
            } else {
                let mut matchers = Vec::new();
                if next == Some('{') {
                    let close = i + chars[i..].iter().position(|&c| c == '}').expect(expr);
                    let inner: String = chars[i + 1..close].iter().collect();
                    for m in inner.split(',').filter(|m| !m.trim().is_empty()) {
                        let op_at = m.find(['=', '!']).expect(m);
                        let op_len = if m[op_at + 1..].starts_with(['=', '~']) {
                            2
                        } else {
                            1
                        };
                        matchers.push(Matcher {
                            label: m[..op_at].trim().to_string(),
                            op: m[op_at..op_at + op_len].to_string(),
                            value: m[op_at + op_len..].trim().trim_matches('"').to_string(),
                        });
                    }
                    i = close + 1;
                }
                q.selectors.push((word, matchers));
            }
        } else {
            i += 1;
        }
    }
    q
}

/// `{{ $labels.x }}` or `{{x}}`: the labels a template prints.
fn template_labels(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let end = rest[start..].find("}}").expect(text) + start;
        let inner = rest[start + 2..end].trim();
        if let Some(label) = inner.strip_prefix("$labels.") {
            out.push(label.trim().to_string());
        } else if !inner.starts_with('$') {
            out.push(inner.to_string());
        }
        rest = &rest[end + 2..];
    }
    out
}

/// Every query of the two files: (where, expression, templates printing its labels).
fn queries() -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("dashboard.json")).unwrap())
            .expect("dashboard.json parses");
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            out.push((
                format!("dashboard panel {:?}", panel["title"]),
                target["expr"].as_str().expect("expr").to_string(),
                vec![target["legendFormat"].as_str().unwrap_or("").to_string()],
            ));
        }
    }
    let text = std::fs::read_to_string(dir().join("alerts.yaml")).unwrap();
    let rules = Value::deserialize(serde_yaml_ng::Deserializer::from_str(&text)).unwrap();
    for group in rules["spec"]["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let templates = rule["annotations"]
                .as_object()
                .map(|a| {
                    a.values()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            out.push((
                format!("alert {}", rule["alert"]),
                rule["expr"].as_str().expect("expr").to_string(),
                templates,
            ));
        }
    }
    out
}

/// Every problem of `expr` against what the worker exports.
fn problems(exported: &Exported, expr: &str, templates: &[String]) -> Vec<String> {
    let q = parse(expr);
    let mut problems = Vec::new();
    let mut labels: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    if q.selectors.is_empty() {
        problems.push("queries no metric".into());
    }
    for f in &q.functions {
        if !FUNCTIONS.contains(&f.as_str()) {
            problems.push(format!("unknown function {f}"));
        }
    }
    for (metric, matchers) in &q.selectors {
        let Some(series) = exported.get(metric) else {
            problems.push(format!("{metric} is not exported"));
            continue;
        };
        labels.extend(series.keys().cloned());
        for m in matchers {
            let Some(values) = series.get(&m.label) else {
                problems.push(format!("{metric} has no label {}", m.label));
                continue;
            };
            let wanted: Vec<&str> = match m.op.as_str() {
                "=~" | "!~" => m.value.split('|').collect(),
                _ => vec![m.value.as_str()],
            };
            for v in wanted {
                if !values.contains(v) {
                    problems.push(format!("{metric}{{{}}} never has the value {v:?}", m.label));
                }
            }
        }
    }
    for label in q
        .grouping
        .iter()
        .cloned()
        .chain(templates.iter().flat_map(|t| template_labels(t)))
    {
        if !labels.contains(&label) {
            problems.push(format!("label {label} is on none of its metrics"));
        }
    }
    problems
}

#[test]
fn the_parser_finds_metrics_matchers_groupings_and_template_labels() {
    let q = parse(
        "histogram_quantile(0.95, sum by (effect, le) (rate(m_bucket{effect=~\"a|b\", x!=\"y\"}[5m]))) > 0 and deriv(max(g)[30m:1m]) > 0",
    );
    let names: Vec<&str> = q.selectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["m_bucket", "g"]);
    let m = &q.selectors[0].1;
    assert_eq!(
        m.iter()
            .map(|m| (m.label.as_str(), m.op.as_str(), m.value.as_str()))
            .collect::<Vec<_>>(),
        [("effect", "=~", "a|b"), ("x", "!=", "y")]
    );
    assert_eq!(q.grouping, BTreeSet::from(["effect".into(), "le".into()]));
    assert_eq!(
        template_labels("{{ $labels.cause }} {{ $value | humanize }} p95 {{operation}}"),
        ["cause", "operation"]
    );
    let exported = exported("m_bucket{effect=\"a\",le=\"1\"} 0\ng 1\n");
    assert_eq!(
        problems(
            &exported,
            "sum by (effect) (m_bucket{effect=\"c\"}) + h",
            &[]
        ),
        [
            "m_bucket{effect} never has the value \"c\"",
            "h is not exported"
        ]
    );
}

// W6: the dashboard and the alert rules query only what a live worker's /metrics exports
// (metrics, labels, label values), and docs/operating.md explains every panel and alert.
#[test]
fn the_dashboard_and_the_alerts_query_only_what_a_live_worker_exports() {
    let db = TestDb::bootstrapped();
    let mut c = db.client();
    insert_namespace(&mut c, "ns1", "provisioning");
    work_enqueue(&mut c, &NewWork::namespace_ensure("ns1", "admin")).unwrap();
    let port = free_port();
    let mut env = worker_env(&db.url);
    env.retain(|(k, _)| *k != "OCC_WORKER_HTTP_ADDR");
    env.push(("OCC_WORKER_HTTP_ADDR", format!("127.0.0.1:{port}")));
    let worker = WorkerProcess::start("noop", &env);
    // One pass, so the reason-code series exists; the rest a fresh worker sets to zero.
    wait_for(
        "a finished pass on /metrics",
        Duration::from_secs(20),
        || {
            http_get_text(("127.0.0.1", port), "/metrics")
                .is_some_and(|(_, body)| body.contains("occ_worker_pass_codes_total{"))
        },
    );
    let (status, body) = http_get_text(("127.0.0.1", port), "/metrics").expect("/metrics");
    assert_eq!(status, 200);
    worker.signal("TERM");
    let exported = exported(&body);

    let queries = queries();
    assert!(queries.len() >= 15, "{queries:?}");
    let wrong: Vec<String> = queries
        .iter()
        .flat_map(|(place, expr, templates)| {
            problems(&exported, expr, templates)
                .into_iter()
                .map(move |p| format!("{place}: {p} in {expr}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}\nexported: {exported:#?}");

    // Every panel and alert has its paragraph in docs/operating.md.
    let operating = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/operating.md"),
    )
    .unwrap();
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("dashboard.json")).unwrap())
            .unwrap();
    let text = std::fs::read_to_string(dir().join("alerts.yaml")).unwrap();
    let rules = Value::deserialize(serde_yaml_ng::Deserializer::from_str(&text)).unwrap();
    let named: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["title"].as_str().unwrap().to_string())
        .chain(
            rules["spec"]["groups"][0]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["alert"].as_str().unwrap().to_string()),
        )
        .collect();
    let missing: Vec<&String> = named
        .iter()
        .filter(|n| !operating.contains(&format!("**{n}**")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operating.md explains no **{missing:?}**"
    );
    let (status, stderr) = worker.wait(Duration::from_secs(15));
    assert!(status.success(), "{stderr}");
}
