//! `STRATA_ALLOC_CONF` configures the default allocator of a process; an invalid setting is
//! a clear error naming the key, never a silently ignored one.

use std::process::Command;

fn strata(conf: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("demo")
        .env("STRATA_ALLOC_CONF", conf)
        .output()
        .expect("the strata binary runs")
}

#[test]
fn an_invalid_setting_is_an_error_naming_the_key() {
    let out = strata("max_split_size_mb:abc");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_split_size_mb"), "{err}");
    assert!(err.contains("STRATA_ALLOC_CONF"), "{err}");

    let out = strata("no_such_key:1");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_key"));
}

#[test]
fn valid_settings_are_accepted() {
    for conf in [
        "",
        "expandable_segments:True",
        "backend:system",
        "max_split_size_mb:64",
    ] {
        let out = strata(conf);
        assert!(
            out.status.success(),
            "{conf}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
