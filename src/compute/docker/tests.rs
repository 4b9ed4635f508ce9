//! Unit tests of the Docker driver's pure parts: its `DOCKER_HOST`, subnet pool and names.

use super::*;

#[test]
fn docker_host_must_be_a_unix_socket_path() {
    assert!(DockerDriver::new("unix:///var/run/docker.sock").is_ok());
    for host in [
        "tcp://localhost:2375",
        "unix://relative.sock",
        "/var/run/docker.sock",
    ] {
        let e = DockerDriver::new(host).err().expect("refused");
        assert_eq!(
            e.kind(),
            &ComputeErrorKind::Permanent("INVALID_DOCKER_HOST".into())
        );
    }
}

#[test]
fn api_versions_are_parsed_and_capped() {
    assert_eq!(parse_api_version("1.45"), Some((1, 45)));
    assert_eq!(parse_api_version("junk"), None);
    assert_eq!((1, 45).min(MAX_API_VERSION), (1, 41));
    assert_eq!((1, 40).min(MAX_API_VERSION), (1, 40));
    assert_eq!((2, 0).min(MAX_API_VERSION), (1, 41));
}

fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        api_version: None,
        body: body.as_bytes().to_vec(),
    }
}

#[test]
fn subnet_refusals_are_told_from_other_refusals() {
    let overlap = r#"{"message":"Pool overlaps with other one on this address space"}"#;
    assert!(is_subnet_taken(&reply(403, overlap)));
    assert!(is_subnet_taken(&reply(403, "")));
    assert!(is_subnet_taken(&reply(400, overlap)));
    assert!(is_subnet_taken(&reply(
        400,
        r#"{"message":"invalid pool request: pool overlaps with other one"}"#
    )));
    assert!(!is_subnet_taken(&reply(
        400,
        r#"{"message":"invalid name"}"#
    )));
    // Default-pool exhaustion is not a taken subnet of ours.
    assert!(!is_subnet_taken(&reply(
        400,
        r#"{"message":"could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network"}"#
    )));
    assert!(!is_subnet_taken(&reply(404, overlap)));
    assert!(!is_subnet_taken(&reply(500, overlap)));
}

#[test]
fn listed_networks_yield_their_ipv4_subnets() {
    let listing = reply(
        200,
        r#"[{"Id":"a","Name":"host","IPAM":{"Driver":"default","Config":[]}},
            {"Id":"b","Name":"bridge","IPAM":{"Config":[{"Subnet":"172.17.0.0/16","Gateway":"172.17.0.1"}]}},
            {"Id":"c","Name":"v6","IPAM":{"Config":[{"Subnet":"fd00::/64"},{"Subnet":"172.16.4.0/24"}]}},
            {"Id":"d","Name":"odd","IPAM":{"Config":null}},
            {"Id":"e","Name":"bare"}]"#,
    );
    let networks: Vec<NetworkInfo> = decode(&listing).unwrap();
    let subnets: Vec<String> = networks
        .iter()
        .flat_map(NetworkInfo::ipv4_subnets)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(subnets, ["172.17.0.0/16", "172.16.4.0/24"]);
}

#[test]
fn the_default_pool_can_be_replaced() {
    let pool: SubnetPool = "10.77.0.0/16:26".parse().unwrap();
    let driver = DockerDriver::new("unix:///var/run/docker.sock").unwrap();
    assert_eq!(driver.subnet_pool, SubnetPool::default());
    assert_eq!(driver.with_subnet_pool(pool).subnet_pool, pool);
}

#[test]
fn statuses_are_classified() {
    assert!(rejected(429).is_transient());
    assert!(rejected(503).is_transient());
    assert_eq!(
        rejected(400).kind(),
        &ComputeErrorKind::Permanent("DOCKER_REQUEST_REJECTED".into())
    );
    assert_eq!(rejected(400).status(), Some(400));
}

#[test]
fn malformed_answers_are_invalid_observations() {
    let reply = Reply {
        status: 200,
        api_version: None,
        body: b"{not json".to_vec(),
    };
    let e = decode::<Vec<ContainerInfo>>(&reply).err().expect("refused");
    assert_eq!(e.class(), "decode");
    assert_eq!(
        e.kind(),
        &ComputeErrorKind::Permanent("INVALID_DRIVER_OBSERVATION".into())
    );
}

#[test]
fn filters_are_encoded() {
    assert_eq!(
        label_filter(&[("occ.namespace", "n-1")]),
        "%7B%22label%22%3A%5B%22occ.namespace%3Dn-1%22%5D%7D"
    );
}
