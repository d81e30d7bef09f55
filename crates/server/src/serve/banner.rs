//! What the server says when it starts: where it listens, what it offers, how to reach it, and
//! how batches of earlier builds replayed.

use crate::config::Config;
use crate::driver;

/// One line on how batches of other builds replayed under this one.
pub(super) fn upgrade_summary(r: &driver::Recovered) -> String {
    let applied = if r.batches == 0 {
        "its state was read from its snapshot (no batch after it); this version's rules decide from now on".to_string()
    } else {
        format!(
            "{} of {} batch(es) written by earlier builds applied as they were decided; this version's rules decide from now on",
            r.applied_other, r.batches
        )
    };
    if r.refused_other == 0 {
        return applied;
    }
    format!(
        "{applied}; {} command(s) this version refuses were skipped (warnings above)",
        r.refused_other
    )
}

/// The banner: where the server listens, its instances, what jobs can reach, who may call,
/// and how clients reach it; with warnings about how it runs.
pub(super) fn print_banner(
    config: &Config,
    addr: std::net::SocketAddr,
    pool: &[String],
    auth: &[String],
    jobs: &str,
) {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let url = format!("{scheme}://{addr}");
    let region = &config.region;
    let clients = if config.auth {
        format!(
            "AWS CLI:  (with the export above) aws batch describe-service-environments --endpoint-url {url}\n\
             boto3:    boto3.Session(profile_name=\"qm-admin\").client(\"batch\", endpoint_url=\"{url}\", region_name=\"{region}\")"
        )
    } else {
        format!(
            "AWS CLI:  export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION={region}\n\
             \x20         aws batch describe-service-environments --endpoint-url {url}\n\
             boto3:    boto3.client(\"batch\", endpoint_url=\"{url}\", region_name=\"{region}\",\n\
             \x20                      aws_access_key_id=\"local\", aws_secret_access_key=\"local\")"
        )
    };
    println!(
        "Quartermaster listening on {url}\n\
         data dir: {data}\n\
         instances: {pool}\n\
         {jobs}\n\
         stop: Ctrl-C or SIGTERM stops this server only; running jobs go on and its next start adopts them (`qm drain --requeue` stops them)\n\
         region {region}, account {account}\n\
         {auth}\n\
         \n\
         {clients}",
        data = config.data_dir.display(),
        pool = pool.join(", "),
        account = config.account_id,
        auth = auth.join("\n"),
    );
    if std::env::var_os("INVOCATION_ID").is_some() {
        // systemd's default KillMode=control-group signals every process of the unit when it
        // stops: the supervisors, and so the jobs, with the server.
        eprintln!(
            "qm: running under systemd: give the unit KillMode=process, or stopping or restarting it stops every running job (their attempts are then recorded lost)"
        );
    }
    if !config.listen.ip().is_loopback() && config.tls.is_none() {
        eprintln!(
            "qm: warning: listening on {} without TLS: SigV4 keeps requests from being forged or altered, but payloads, environment variables and logs cross the network in clear text; put the server behind a TLS proxy or keep it on a trusted network",
            config.listen
        );
    }
}
