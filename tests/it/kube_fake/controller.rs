//! The fake API server's controllers (test-only), advanced by one `tick` every ~20 ms:
//! namespace termination, garbage collection by ownerReferences, the deployment controller
//! (one ReplicaSet per pod template, Recreate and RollingUpdate), the ReplicaSet controller
//! (pods, quota refusals, Pod Security admission), the persistent-volume controller (claims
//! bind unless their class never does), a scheduler and kubelet stand-in (pods waiting for an
//! unbound claim stay Unschedulable; otherwise pod phases per `PodBehaviour`, graceful pod
//! termination), and the EndpointSlice controller.
//!
//! Each step reads the store and writes only what changed, as the real controllers do; none of
//! them answers a request.

use super::store::{map_selector_matches, now_stamp, resource, safe_encode, Key, Store, RESOURCES};
use super::{psa, FakeOptions, PodBehaviour};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Test-set pod behaviours: (namespace, deployment name prefix, behaviour).
pub type Behaviours = [(String, String, PodBehaviour)];

/// The namespaces the next tick reads: written since the last one, or waiting on time (a
/// pod still starting, a graceful deletion); `full` adds every namespace, as a resync does.
/// Finishes due graceful deletions first.
pub fn scope(store: &mut Store, opts: &FakeOptions, now: Instant, full: bool) -> Vec<String> {
    finish_graceful_deletions(store, opts, now);
    let mut scope = std::mem::take(&mut store.dirty);
    if full || std::mem::take(&mut store.all_dirty) {
        scope.extend(store.objects.keys().map(|(_, ns, _)| ns.clone()));
    }
    // Pods change with age until twice `pod_start` (image pull back-off); keep a margin.
    let settling = opts.pod_start * 2 + Duration::from_millis(200);
    scope.extend(
        store
            .pod_created
            .values()
            .filter(|(created, _)| now.duration_since(*created) <= settling)
            .map(|(_, ns)| ns.clone()),
    );
    scope.extend(store.orphaned.keys().map(|(_, ns, _)| ns.clone()));
    scope.extend(store.deleting.keys().map(|(plural, ns, name)| {
        if *plural == "namespaces" {
            name.clone()
        } else {
            ns.clone()
        }
    }));
    scope.into_iter().collect()
}

/// One pass of every controller over one namespace. The controller thread takes the lock per
/// namespace, so requests are not held up by a whole tick.
pub fn tick_namespace(
    store: &mut Store,
    ns: &str,
    opts: &FakeOptions,
    behaviours: &Behaviours,
    now: Instant,
) {
    collect_garbage(store, ns, opts, now);
    let ns = Some(ns);
    for deployment in store.all("deployments", ns) {
        roll_out(store, &deployment);
    }
    for rs in store.all("replicasets", ns) {
        scale_replica_set(store, &rs, behaviours);
    }
    for claim in store.all("persistentvolumeclaims", ns) {
        bind_claim(store, &claim);
    }
    for pod in store.all("pods", ns) {
        run_pod(store, &pod, opts, behaviours, now);
    }
    for rs in store.all("replicasets", ns) {
        replica_set_status(store, &rs);
    }
    for deployment in store.all("deployments", ns) {
        deployment_status(store, &deployment, behaviours);
    }
    for service in store.all("services", ns) {
        endpoint_slice(store, &service);
    }
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or("")
}

fn terminating(obj: &Value) -> bool {
    obj["metadata"].get("deletionTimestamp").is_some()
}

/// The behaviour for an object named after a deployment: the longest matching prefix wins.
pub fn behaviour_for(behaviours: &Behaviours, namespace: &str, name: &str) -> PodBehaviour {
    behaviours
        .iter()
        .filter(|(ns, prefix, _)| ns == namespace && name.starts_with(prefix.as_str()))
        .max_by_key(|(_, prefix, _)| prefix.len())
        .map(|(_, _, b)| b.clone())
        .unwrap_or(PodBehaviour::Ready)
}

/// Namespaces past `terminating_for` vanish with their content; pods past `pod_termination`,
/// unless the test holds terminating pods (`KubeFake::hold_terminating_pods`).
fn finish_graceful_deletions(store: &mut Store, opts: &FakeOptions, now: Instant) {
    let hold_pods = store.hold_terminating_pods;
    let due: Vec<Key> = store
        .deleting
        .iter()
        .filter(|((plural, _, _), _)| !(hold_pods && *plural == "pods"))
        .filter(|((plural, _, _), since)| {
            let wait = if *plural == "namespaces" {
                opts.terminating_for
            } else {
                opts.pod_termination
            };
            now.duration_since(**since) >= wait
        })
        .map(|(k, _)| k.clone())
        .collect();
    for key in due {
        if key.0 == "namespaces" {
            let inside: Vec<Key> = store
                .objects
                .keys()
                .filter(|(_, ns, _)| *ns == key.2)
                .cloned()
                .collect();
            for k in inside {
                store.remove(&k);
            }
        }
        store.remove(&key);
    }
}

/// Objects of `ns` whose every owner is gone are deleted (pods gracefully) once they have
/// been orphans for `gc_delay`, as the real collector does a moment after the owner's delete
/// request; owners live in their dependents' namespace.
fn collect_garbage(store: &mut Store, ns: &str, opts: &FakeOptions, now: Instant) {
    let objects: Vec<(Key, Arc<Value>)> = RESOURCES
        .iter()
        .flat_map(|r| {
            store
                .all(r.plural, Some(ns))
                .into_iter()
                .map(move |o| ((r.plural, ns.to_string(), meta(&o, "name").to_string()), o))
        })
        .collect();
    let uids: HashSet<&str> = objects.iter().map(|(_, o)| meta(o, "uid")).collect();
    let orphans: Vec<(Key, Value)> = objects
        .iter()
        .filter(|(_, o)| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|refs| {
                    !refs.is_empty()
                        && refs
                            .iter()
                            .all(|r| !uids.contains(r["uid"].as_str().unwrap_or("")))
                })
        })
        .map(|(k, o)| (k.clone(), Value::clone(o)))
        .collect();
    let found: HashSet<&Key> = orphans.iter().map(|(k, _)| k).collect();
    store
        .orphaned
        .retain(|key, _| key.1 != ns || found.contains(key));
    let due: Vec<(Key, Value)> = orphans
        .into_iter()
        .filter(|(key, _)| {
            let since = *store.orphaned.entry(key.clone()).or_insert(now);
            now.duration_since(since) >= opts.gc_delay
        })
        .collect();
    for (key, obj) in due {
        store.orphaned.remove(&key);
        if key.0 == "pods" {
            if !terminating(&obj) {
                store.begin_graceful_delete(resource("pods"), key, obj);
            }
        } else {
            store.remove(&key);
        }
    }
}

fn owned_by<'a>(objects: &'a [Arc<Value>], owner: &Value) -> impl Iterator<Item = &'a Value> + 'a {
    let uid = meta(owner, "uid").to_string();
    objects.iter().map(|o| &**o).filter(move |o| {
        o["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str()))
    })
}

fn owner_ref(owner: &Value) -> Value {
    json!([{
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

/// The `pod-template-hash` of a pod template.
fn template_hash(template: &Value) -> String {
    let text = template.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    safe_encode(h, 10)
}

/// The template hash of a Deployment, fixed by its uid and generation (computed once).
fn hash_of(store: &mut Store, deployment: &Value) -> String {
    let memo = (
        meta(deployment, "uid").to_string(),
        deployment["metadata"]["generation"].as_i64().unwrap_or(0),
    );
    if let Some(hash) = store.template_hashes.get(&memo) {
        return hash.clone();
    }
    let hash = template_hash(&deployment["spec"]["template"]);
    store.template_hashes.insert(memo, hash.clone());
    hash
}

fn replicas(obj: &Value) -> i64 {
    obj["spec"]["replicas"].as_i64().unwrap_or(1)
}

fn pod_ready(pod: &Value) -> bool {
    !terminating(pod)
        && pod["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Deployment controller: the ReplicaSet of the current template, and old ones scaled down as
/// the strategy says (Recreate: old pods all gone first; RollingUpdate: new ready first).
fn roll_out(store: &mut Store, deployment: &Value) {
    let ns = meta(deployment, "namespace");
    let name = meta(deployment, "name");
    let desired = replicas(deployment);
    let hash = hash_of(store, deployment);
    let new_name = format!("{name}-{hash}");
    let recreate = deployment["spec"]["strategy"]["type"] == "Recreate";

    let sets = store.all("replicasets", Some(ns));
    let pods = store.all("pods", Some(ns));
    let owned: Vec<&Value> = owned_by(&sets, deployment).collect();
    let old: Vec<&Value> = owned
        .iter()
        .copied()
        .filter(|rs| meta(rs, "name") != new_name)
        .collect();
    let old_pods = old.iter().any(|rs| owned_by(&pods, rs).next().is_some());
    let new_ready = owned
        .iter()
        .find(|rs| meta(rs, "name") == new_name)
        .map(|rs| owned_by(&pods, rs).filter(|p| pod_ready(p)).count() as i64)
        .unwrap_or(0);

    let new_replicas = if recreate && old_pods { 0 } else { desired };
    let scale_old_down = recreate || new_ready >= desired;
    if scale_old_down {
        for rs in &old {
            if replicas(rs) != 0 {
                let mut rs = (*rs).clone();
                rs["spec"]["replicas"] = json!(0);
                store.write(resource("replicasets"), rs);
            }
        }
    }
    let revision = owned.len() + usize::from(!owned.iter().any(|rs| meta(rs, "name") == new_name));
    match store.lookup(resource("replicasets"), ns, &new_name) {
        Some(rs) => {
            if replicas(rs) != new_replicas {
                let mut rs = rs.clone();
                rs["spec"]["replicas"] = json!(new_replicas);
                store.write(resource("replicasets"), rs);
            }
        }
        None => {
            let mut template = deployment["spec"]["template"].clone();
            template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
            let mut labels = template["metadata"]["labels"].clone();
            labels["pod-template-hash"] = json!(hash);
            let mut selector = deployment["spec"]["selector"].clone();
            selector["matchLabels"]["pod-template-hash"] = json!(hash);
            let rs = json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": new_name,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {"deployment.kubernetes.io/revision": revision.to_string()},
                    "ownerReferences": owner_ref(deployment),
                },
                "spec": {"replicas": new_replicas, "selector": selector, "template": template},
            });
            // Refused like any create while the namespace terminates.
            let _ = store.create(resource("replicasets"), Some(ns), rs, false);
        }
    }
}

/// ReplicaSet controller: creates or gracefully deletes pods toward `spec.replicas`; under
/// `QuotaExceeded`, or when Pod Security admission (`restricted` enforced on the namespace)
/// refuses the template, it creates none and reports `ReplicaFailure` `FailedCreate`.
fn scale_replica_set(store: &mut Store, rs: &Value, behaviours: &Behaviours) {
    let ns = meta(rs, "namespace");
    let name = meta(rs, "name");
    let pods = store.all("pods", Some(ns));
    let live: Vec<&Value> = owned_by(&pods, rs).filter(|p| !terminating(p)).collect();
    let want = replicas(rs);
    let have = live.len() as i64;
    let quota = behaviour_for(behaviours, ns, name) == PodBehaviour::QuotaExceeded;
    // Pod Security admission refuses the ReplicaSet's pods in a restricted namespace.
    let enforced = store
        .lookup(resource("namespaces"), "", ns)
        .is_some_and(|n| {
            n["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        });
    let violations = if have < want && enforced {
        psa::restricted_violations(&rs["spec"]["template"]["spec"])
    } else {
        Vec::new()
    };
    let mut failure = Value::Null;
    if have < want && !violations.is_empty() {
        failure = json!({
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": format!(
                "pods \"{name}-{}\" is forbidden: violates PodSecurity \"restricted:latest\": {}",
                safe_encode(store.next_random(), 5),
                violations.join(", ")
            ),
        });
    } else if have < want && quota {
        failure = json!({
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": format!(
                "pods \"{name}-{}\" is forbidden: exceeded quota: compute-quota, requested: limits.cpu=500m, used: limits.cpu=2, limited: limits.cpu=2",
                safe_encode(store.next_random(), 5)
            ),
        });
    } else if have < want {
        for _ in have..want {
            create_pod(store, rs);
        }
    } else if have > want {
        // Not-ready pods go first, as the real controller prefers them.
        let mut victims = live.clone();
        victims.sort_by_key(|p| pod_ready(p));
        for pod in victims.into_iter().take((have - want) as usize) {
            let key = ("pods", ns.to_string(), meta(pod, "name").to_string());
            store.begin_graceful_delete(resource("pods"), key, pod.clone());
        }
    }
    // The failure condition stays until a create succeeds (quota lifted).
    let mut rs = store
        .lookup(resource("replicasets"), ns, name)
        .cloned()
        .unwrap_or_else(|| rs.clone());
    let had_failure = rs["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "ReplicaFailure"));
    if !failure.is_null() && !had_failure {
        failure["lastTransitionTime"] = json!(now_stamp());
        rs["status"]["conditions"] = json!([failure]);
        store.write(resource("replicasets"), rs);
    } else if failure.is_null() && had_failure && !quota {
        rs["status"]["conditions"] = json!([]);
        store.write(resource("replicasets"), rs);
    }
}

fn create_pod(store: &mut Store, rs: &Value) {
    let template = &rs["spec"]["template"];
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{}-", meta(rs, "name")),
            "namespace": meta(rs, "namespace"),
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"].get("annotations").cloned().unwrap_or(json!({})),
            "ownerReferences": owner_ref(rs),
        },
        "spec": template["spec"],
        "status": {"phase": "Pending"},
    });
    let _ = store.create(resource("pods"), None, pod, false);
}

/// The kubelet stand-in: a pod's status after `pod_start`, as its behaviour dictates.
/// A StorageClass whose claims never bind (no provisioner answers), for tests of an unbound
/// claim; every other claim binds at once, as a default provisioner with Immediate binding.
pub const UNBOUND_STORAGE_CLASS: &str = "occ-test-unbound";

/// The persistent-volume controller: binds a claim unless its class never binds.
fn bind_claim(store: &mut Store, claim: &Value) {
    let phase = if claim["spec"]["storageClassName"] == UNBOUND_STORAGE_CLASS {
        "Pending"
    } else {
        "Bound"
    };
    if claim["status"]["phase"] != phase {
        let mut claim = claim.clone();
        claim["status"] = json!({"phase": phase});
        store.write(resource("persistentvolumeclaims"), claim);
    }
}

/// Whether a pod mounts a claim that is not bound (or does not exist): the scheduler leaves it
/// Pending, `unbound immediate PersistentVolumeClaims`.
fn waits_for_a_claim(store: &Store, pod: &Value) -> bool {
    let ns = meta(pod, "namespace");
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .any(|claim| {
            store
                .lookup(resource("persistentvolumeclaims"), ns, claim)
                .is_none_or(|c| c["status"]["phase"] != "Bound")
        })
}

fn run_pod(
    store: &mut Store,
    pod: &Value,
    opts: &FakeOptions,
    behaviours: &Behaviours,
    now: Instant,
) {
    if terminating(pod) {
        return;
    }
    let age = store
        .pod_created
        .get(meta(pod, "uid"))
        .map(|(t, _)| now.duration_since(*t))
        .unwrap_or(Duration::MAX);
    let behaviour = behaviour_for(behaviours, meta(pod, "namespace"), meta(pod, "name"));
    let status = if waits_for_a_claim(store, pod) {
        json!({
            "phase": "Pending",
            "conditions": [pod_condition("PodScheduled", false, "Unschedulable",
                "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")],
            "qosClass": "Burstable",
        })
    } else if let Some(message) = unresolved_secret_ref(store, pod)
        .filter(|_| opts.resolve_secret_refs && age >= opts.pod_start)
    {
        let waiting =
            json!({"waiting": {"reason": "CreateContainerConfigError", "message": message}});
        scheduled(pod, "Pending", false, waiting, json!({}), 0)
    } else {
        kubelet_status(pod, &behaviour, age, opts.pod_start)
    };
    if pod["status"] != status {
        let mut pod = pod.clone();
        pod["status"] = status;
        store.write(resource("pods"), pod);
    }
}

/// The kubelet's message for the first `secretKeyRef` of the pod's containers that does not
/// resolve (not `optional`): `secret "NAME" not found`, or `couldn't find key KEY in Secret
/// NAMESPACE/NAME`.
fn unresolved_secret_ref(store: &Store, pod: &Value) -> Option<String> {
    let ns = meta(pod, "namespace");
    let refs = ["initContainers", "containers"]
        .iter()
        .filter_map(|list| pod["spec"][*list].as_array())
        .flatten()
        .filter_map(|c| c["env"].as_array())
        .flatten()
        .map(|e| &e["valueFrom"]["secretKeyRef"])
        .filter(|r| r.is_object() && r["optional"] != true);
    for r in refs {
        let (name, key) = (r["name"].as_str()?, r["key"].as_str()?);
        match store.get(resource("secrets"), ns, name) {
            Err(_) => return Some(format!("secret \"{name}\" not found")),
            Ok(secret) if secret["data"].get(key).is_none() => {
                return Some(format!("couldn't find key {key} in Secret {ns}/{name}"))
            }
            Ok(_) => {}
        }
    }
    None
}

fn pod_condition(kind: &str, ok: bool, reason: &str, message: &str) -> Value {
    let mut c = json!({"type": kind, "status": if ok { "True" } else { "False" }});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
        c["message"] = json!(message);
    }
    c
}

/// The status a kubelet reports for a scheduled pod: every container in `state`.
fn scheduled(
    pod: &Value,
    phase: &str,
    ready: bool,
    state: Value,
    last: Value,
    restarts: u32,
) -> Value {
    let uid = meta(pod, "uid");
    let seed = uid
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let (reason, message) = if ready {
        ("", "")
    } else {
        (
            "ContainersNotReady",
            "containers with unready status: [app]",
        )
    };
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": ready, "started": state.get("running").is_some(),
                "restartCount": restarts, "state": state, "lastState": last,
            })
        })
        .collect();
    json!({
        "phase": phase,
        "conditions": [
            pod_condition("Initialized", true, "", ""),
            pod_condition("Ready", ready, reason, message),
            pod_condition("ContainersReady", ready, reason, message),
            pod_condition("PodScheduled", true, "", ""),
        ],
        "hostIP": "172.18.0.2",
        "podIP": format!("10.244.{}.{}", seed % 256, (seed >> 8) % 253 + 2),
        "containerStatuses": containers,
    })
}

/// What the pod looks like `age` after creation under its behaviour, init containers first:
/// while one has not completed the pod is Pending, not Initialized, and its containers wait
/// with `PodInitializing`; a failing one is restarted with a growing `restartCount`, its last
/// exit in `lastState` (CrashLoopBackOff between restarts), as a kubelet reports it.
fn kubelet_status(
    pod: &Value,
    behaviour: &PodBehaviour,
    age: Duration,
    pod_start: Duration,
) -> Value {
    let inits = pod["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut status = containers_status(pod, behaviour, age, pod_start);
    if inits.is_empty() || *behaviour == PodBehaviour::Unschedulable {
        return status;
    }
    let started = json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}});
    let completed = json!({"terminated": {"exitCode": 0, "reason": "Completed",
        "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"}});
    let failing = matches!(
        behaviour,
        PodBehaviour::SetupRefused | PodBehaviour::SetupFailing
    );
    let (state, last, restarts, done) = if age < pod_start {
        (started, json!({}), 0, false)
    } else if failing {
        let mut exit = json!({"exitCode": 1, "reason": "Error",
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z"});
        if *behaviour == PodBehaviour::SetupRefused {
            exit["message"] = json!("WORKSPACE_SETUP_REFUSED");
        }
        let exit = json!({"terminated": exit});
        let restarts = ((age - pod_start).as_millis() / pod_start.as_millis().max(1)) as u32;
        if restarts == 0 {
            (exit, json!({}), 0, false)
        } else {
            let backoff = json!({"waiting": {"reason": "CrashLoopBackOff",
                "message": "back-off 10s restarting failed container"}});
            (backoff, exit, restarts, false)
        }
    } else {
        (completed, json!({}), 0, true)
    };
    let statuses: Vec<Value> = inits
        .iter()
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": done, "started": false,
                "restartCount": restarts, "state": state, "lastState": last,
            })
        })
        .collect();
    status["initContainerStatuses"] = json!(statuses);
    if !done {
        let names: Vec<&str> = inits.iter().filter_map(|c| c["name"].as_str()).collect();
        let message = format!("containers with incomplete status: [{}]", names.join(" "));
        status["phase"] = json!("Pending");
        status["conditions"][0] =
            pod_condition("Initialized", false, "ContainersNotInitialized", &message);
        for container in status["containerStatuses"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            container["state"] = json!({"waiting": {"reason": "PodInitializing"}});
            container["lastState"] = json!({});
            container["ready"] = json!(false);
            container["started"] = json!(false);
            container["restartCount"] = json!(0);
        }
        for c in ["Ready", "ContainersReady"] {
            if let Some(cond) = status["conditions"]
                .as_array_mut()
                .and_then(|cs| cs.iter_mut().find(|x| x["type"] == c))
            {
                *cond = pod_condition(
                    c,
                    false,
                    "ContainersNotReady",
                    "containers with unready status: [harness]",
                );
            }
        }
    }
    status
}

/// The containers' status `age` after creation under the pod's behaviour.
fn containers_status(
    pod: &Value,
    behaviour: &PodBehaviour,
    age: Duration,
    pod_start: Duration,
) -> Value {
    let running = json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}});
    let none = json!({});
    if *behaviour == PodBehaviour::Unschedulable {
        return json!({
            "phase": "Pending",
            "conditions": [pod_condition("PodScheduled", false, "Unschedulable",
                "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")],
            "qosClass": "Burstable",
        });
    }
    if age < pod_start {
        let creating = json!({"waiting": {"reason": "ContainerCreating"}});
        return scheduled(pod, "Pending", false, creating, none, 0);
    }
    match behaviour {
        PodBehaviour::ImagePullBackOff => {
            let image = pod["spec"]["containers"][0]["image"].as_str().unwrap_or("");
            let waiting = if age < pod_start * 2 {
                json!({"waiting": {"reason": "ErrImagePull", "message": format!("failed to pull and unpack image \"{image}\": not found")}})
            } else {
                json!({"waiting": {"reason": "ImagePullBackOff", "message": format!("Back-off pulling image \"{image}\"")}})
            };
            scheduled(pod, "Pending", false, waiting, none, 0)
        }
        PodBehaviour::HeldFailure(code) => {
            let terminated = json!({"terminated": {
                "exitCode": 1, "reason": "Error", "message": code,
                "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:01Z",
            }});
            scheduled(pod, "Running", false, terminated.clone(), terminated, 1)
        }
        // A held harness runs unready and is never restarted: no liveness probe fails.
        PodBehaviour::NeverReady
        | PodBehaviour::ProgressDeadlineExceeded
        | PodBehaviour::HeldUnready(_) => scheduled(pod, "Running", false, running, none, 0),
        PodBehaviour::Ready
        | PodBehaviour::QuotaExceeded
        | PodBehaviour::Unschedulable
        | PodBehaviour::SetupRefused
        | PodBehaviour::SetupFailing => scheduled(pod, "Running", true, running, none, 0),
    }
}

fn omit_zero(status: &mut Map<String, Value>, field: &str, n: i64) {
    if n > 0 {
        status.insert(field.into(), json!(n));
    }
}

fn replica_set_status(store: &mut Store, rs: &Value) {
    let ns = meta(rs, "namespace");
    let Some(rs) = store.shared(resource("replicasets"), ns, meta(rs, "name")) else {
        return;
    };
    let pods = store.all("pods", Some(ns));
    let live: Vec<&Value> = owned_by(&pods, &rs).filter(|p| !terminating(p)).collect();
    let ready = live.iter().filter(|p| pod_ready(p)).count() as i64;
    let mut status = Map::new();
    status.insert("replicas".into(), json!(live.len()));
    omit_zero(&mut status, "fullyLabeledReplicas", live.len() as i64);
    omit_zero(&mut status, "readyReplicas", ready);
    omit_zero(&mut status, "availableReplicas", ready);
    status.insert(
        "observedGeneration".into(),
        rs["metadata"]["generation"].clone(),
    );
    if let Some(c) = rs["status"]
        .get("conditions")
        .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
    {
        status.insert("conditions".into(), c.clone());
    }
    let status = Value::Object(status);
    if rs["status"] != status {
        let mut rs = Value::clone(&rs);
        rs["status"] = status;
        store.write(resource("replicasets"), rs);
    }
}

/// `maxUnavailable` of a RollingUpdate deployment (int or percent, rounded down); 0 for Recreate.
fn max_unavailable(deployment: &Value, desired: i64) -> i64 {
    let v = &deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"];
    if deployment["spec"]["strategy"]["type"] == "Recreate" {
        0
    } else if let Some(n) = v.as_i64() {
        n
    } else if let Some(p) = v
        .as_str()
        .and_then(|s| s.strip_suffix('%'))
        .and_then(|s| s.parse::<i64>().ok())
    {
        desired * p / 100
    } else {
        desired / 4
    }
}

/// A condition, keeping its transition time when its status did not change.
fn condition(old: &Value, kind: &str, ok: bool, reason: &str, message: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    let previous = old["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind));
    let transition = previous
        .filter(|c| c["status"] == status)
        .map(|c| c["lastTransitionTime"].clone())
        .unwrap_or_else(|| json!(now_stamp()));
    let update = previous
        .filter(|c| c["status"] == status && c["reason"] == reason)
        .map(|c| c["lastUpdateTime"].clone())
        .unwrap_or_else(|| json!(now_stamp()));
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": transition, "lastUpdateTime": update})
}

/// The live pods of a deployment's ReplicaSets.
struct Counts {
    total: i64,
    /// Of the current template's ReplicaSet.
    updated: i64,
    ready: i64,
    /// The current ReplicaSet's ReplicaFailure condition.
    failure: Option<Value>,
}

fn count_pods(store: &Store, deployment: &Value, new_name: &str) -> Counts {
    let ns = meta(deployment, "namespace");
    let sets = store.all("replicasets", Some(ns));
    let pods = store.all("pods", Some(ns));
    let mut counts = Counts {
        total: 0,
        updated: 0,
        ready: 0,
        failure: None,
    };
    for rs in owned_by(&sets, deployment) {
        let current = meta(rs, "name") == new_name;
        for pod in owned_by(&pods, rs).filter(|p| !terminating(p)) {
            counts.total += 1;
            counts.ready += i64::from(pod_ready(pod));
            counts.updated += i64::from(current);
        }
        if current {
            counts.failure = rs["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "ReplicaFailure"))
                .cloned();
        }
    }
    counts
}

/// Deployment status as the real controller reports it (zero counts omitted).
fn deployment_status(store: &mut Store, deployment: &Value, behaviours: &Behaviours) {
    let ns = meta(deployment, "namespace");
    let name = meta(deployment, "name");
    let Some(deployment) = store.shared(resource("deployments"), ns, name) else {
        return;
    };
    let desired = replicas(&deployment);
    let new_name = format!("{name}-{}", hash_of(store, &deployment));
    let Counts {
        total,
        updated,
        ready,
        failure,
    } = count_pods(store, &deployment, &new_name);
    let available = ready;
    let mut status = Map::new();
    status.insert(
        "observedGeneration".into(),
        deployment["metadata"]["generation"].clone(),
    );
    omit_zero(&mut status, "replicas", total);
    omit_zero(&mut status, "updatedReplicas", updated);
    omit_zero(&mut status, "readyReplicas", ready);
    omit_zero(&mut status, "availableReplicas", available);
    omit_zero(
        &mut status,
        "unavailableReplicas",
        (desired - available).max(0),
    );
    let minimum = available >= desired - max_unavailable(&deployment, desired);
    let complete = updated == desired && total == desired && available == desired;
    let mut conditions = vec![
        if minimum {
            condition(
                &deployment,
                "Available",
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
            )
        } else {
            condition(
                &deployment,
                "Available",
                false,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
            )
        },
        if complete {
            condition(
                &deployment,
                "Progressing",
                true,
                "NewReplicaSetAvailable",
                &format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            )
        } else if behaviour_for(behaviours, ns, name) == PodBehaviour::ProgressDeadlineExceeded {
            condition(
                &deployment,
                "Progressing",
                false,
                "ProgressDeadlineExceeded",
                &format!("ReplicaSet \"{new_name}\" has timed out progressing."),
            )
        } else {
            condition(
                &deployment,
                "Progressing",
                true,
                "ReplicaSetUpdated",
                &format!("ReplicaSet \"{new_name}\" is progressing."),
            )
        },
    ];
    if let Some(f) = failure {
        conditions.push(condition(
            &deployment,
            "ReplicaFailure",
            true,
            "FailedCreate",
            f["message"].as_str().unwrap_or(""),
        ));
    }
    status.insert("conditions".into(), Value::Array(conditions));
    let status = Value::Object(status);
    if deployment["status"] != status {
        let mut deployment = Value::clone(&deployment);
        deployment["status"] = status;
        store.write(resource("deployments"), deployment);
    }
}

/// EndpointSlice controller: one slice per Service with a selector, listing the selected pods
/// that have an IP, ready only when the pod is ready.
fn endpoint_slice(store: &mut Store, service: &Value) {
    let ns = meta(service, "namespace");
    let name = meta(service, "name");
    let slices = store.all("endpointslices", Some(ns));
    let existing = owned_by(&slices, service).next().cloned();
    let Some(selector) = service["spec"]["selector"]
        .as_object()
        .filter(|s| !s.is_empty())
    else {
        if let Some(slice) = existing {
            store.remove(&(
                "endpointslices",
                ns.to_string(),
                meta(&slice, "name").to_string(),
            ));
        }
        return;
    };
    let pods = store.all("pods", Some(ns));
    let endpoints: Vec<Value> = pods
        .iter()
        .filter(|p| map_selector_matches(selector, p["metadata"].get("labels")))
        .filter(|p| p["status"]["podIP"].is_string())
        .map(|p| {
            let ready = pod_ready(p);
            json!({
                "addresses": [p["status"]["podIP"]],
                "conditions": {"ready": ready, "serving": ready, "terminating": terminating(p)},
                "targetRef": {"kind": "Pod", "name": p["metadata"]["name"], "namespace": ns, "uid": p["metadata"]["uid"]},
                "nodeName": "fake-node",
            })
        })
        .collect();
    let ports: Vec<Value> = service["spec"]["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let port = p["targetPort"].as_i64().or_else(|| p["port"].as_i64());
                    json!({"name": p.get("name").cloned().unwrap_or(json!("")), "port": port,
                           "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP"))})
                })
                .collect()
        })
        .unwrap_or_default();
    match existing {
        Some(mut slice) => {
            slice["endpoints"] = Value::Array(endpoints);
            slice["ports"] = Value::Array(ports);
            store.write_if_changed(resource("endpointslices"), slice);
        }
        None => {
            let slice = json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "generateName": format!("{name}-"),
                    "namespace": ns,
                    "labels": {
                        "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    },
                    "ownerReferences": owner_ref(service),
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": ports,
            });
            let _ = store.create(resource("endpointslices"), None, slice, false);
        }
    }
}
