use super::*;

fn config() -> ServeConfig {
    ServeConfig {
        profile: "10k".into(),
        bind: IpAddr::from([127, 0, 0, 1]),
        port: 9001,
        admin: None,
        reuseport: false,
        acceptors: 0,
        workers: 2,
        workers_follow_cores: true,
        coalesce: Duration::from_micros(250),
        processes: Processes::Auto,
        processes_from: "server.processes".into(),
        tls: None,
        log_format: LogFormat::Json,
        log_level: Some("debug".into()),
        cluster: None,
        replaced_drain_rate: 0,
        server: ServerConfig::default(),
        builtin: BuiltinConfig::default(),
        settings: vec![("max connections".into(), "10".into(), "profile".into())],
        memory_budget_derived: true,
        token_auth: Some(TokenAuth {
            max_lifetime: Some(60),
            audience: Some("svc".into()),
        }),
        secrets: Secrets {
            api_key: Some(ApiKey::new("an-api-key-long-enough-for-the-api").unwrap()),
            auth_secret: Some("a-jwt-secret-of-at-least-32-bytes!!\n".into()),
        },
    }
}

/// The secrets cross in their own variables only: the JSON a child reads (and /proc shows)
/// holds none of them.
#[test]
fn the_secrets_stay_out_of_the_json_and_come_back_from_the_environment() {
    let c = config();
    let env = c.child_env();
    let json = &env.iter().find(|(k, _)| *k == ENV_CONFIG).unwrap().1;
    assert!(
        !json.contains("an-api-key") && !json.contains("jwt-secret"),
        "{json}"
    );
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    let secrets = Secrets {
        api_key: get(ENV_API_KEY).map(|k| ApiKey::new(&k).unwrap()),
        auth_secret: get(ENV_AUTH_SECRET),
    };
    let back = ServeConfig::from_json(json, secrets).unwrap();
    assert_eq!(back.to_json(), *json);
    assert!(
        back.builtin.channels.auth.is_some(),
        "the verifier is rebuilt"
    );
    assert_eq!(
        back.secrets.api_key.unwrap().expose(),
        "an-api-key-long-enough-for-the-api"
    );
    // Without its secret, a configuration that checks tokens is refused, not run open.
    let e = ServeConfig::from_json(json, Secrets::default()).unwrap_err();
    assert!(e.to_string().contains(ENV_AUTH_SECRET), "{e}");
}

#[test]
fn another_format_version_is_refused_by_name() {
    let json = config()
        .to_json()
        .replacen("\"version\":2", "\"version\":3", 1);
    let e = ServeConfig::from_json(&json, config().secrets).unwrap_err();
    assert!(
        e.to_string().contains("format 3, this wstune reads 2"),
        "{e}"
    );
    let e = ServeConfig::from_json("{}", Secrets::default()).unwrap_err();
    assert!(e.to_string().contains(ENV_CONFIG), "{e}");
}

#[test]
fn the_self_test_exempts_loopback_and_keeps_the_operators_list() {
    let mut s = embedded_server::abuse::LimitSettings::default();
    s.exempt
        .push(embedded_server::abuse::Cidr::parse("10.0.0.1").unwrap());
    exempt_self_test(&mut s);
    assert!(s.is_exempt("127.0.0.42".parse().unwrap()));
    assert!(s.is_exempt("::1".parse().unwrap()));
    assert!(s.is_exempt("10.0.0.1".parse().unwrap()));
    exempt_self_test(&mut s);
    assert_eq!(s.exempt.len(), 3, "added once");
}
