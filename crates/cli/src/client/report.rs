//! `qm report usage`: a [`UsageReport`] as a table for people or CSV for spreadsheets (JSON is
//! the report itself). Pure functions from the report to text.

use qm_api::qm::{UsageBy, UsageReport, UsageRow};

use super::format::table;
use super::time::utc;

/// Hours as the table shows them: one decimal, `-` for nothing.
fn hours(h: f64) -> String {
    if h == 0.0 {
        "-".into()
    } else {
        format!("{h:.1}")
    }
}

fn seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| format!("{s:.0}"))
}

fn key_cells(by: UsageBy, row: &UsageRow) -> Vec<String> {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    match by {
        UsageBy::Share => vec![s(&row.job_queue), s(&row.quota_share_name)],
        UsageBy::Principal => vec![s(&row.principal)],
        UsageBy::InstanceType => vec![s(&row.instance_type)],
    }
}

fn key_headers(by: UsageBy) -> Vec<&'static str> {
    match by {
        UsageBy::Share => vec!["QUEUE", "SHARE"],
        UsageBy::Principal => vec!["PRINCIPAL"],
        UsageBy::InstanceType => vec!["INSTANCE TYPE"],
    }
}

/// The report as aligned columns: instance-hours by whose capacity, GPU-hours used,
/// preemptions, lost work and queueing delay; a title line with the window and the notes
/// after the table.
pub fn usage_table(report: &UsageReport) -> String {
    let mut headers = vec!["PERIOD"];
    headers.extend(key_headers(report.by));
    headers.extend([
        "USED",
        "OWN",
        "BORROWED",
        "LENT",
        "IDLE",
        "GPU-H",
        "PREEMPTED",
        "CAUSED",
        "LOST",
        "STARTS",
        "WAIT P50",
        "P90",
        "P99",
        "CPU-H",
        "PEAK MEM",
        "GPU UTIL",
    ]);
    let rows: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            let mut cells = vec![period(report, r)];
            cells.extend(key_cells(report.by, r));
            let h = &r.instance_hours;
            let q = r.queue_delay_seconds;
            cells.extend([
                hours(h.used),
                hours(h.within_entitlement),
                hours(h.borrowed),
                hours(h.lent_out),
                hours(h.idle_entitlement),
                hours(r.gpu_hours.used),
                r.preemptions_suffered.to_string(),
                r.preemptions_caused.to_string(),
                hours(r.lost_instance_hours),
                r.starts.to_string(),
                seconds(q.map(|q| q.p50)),
                seconds(q.map(|q| q.p90)),
                seconds(q.map(|q| q.p99)),
                hours(r.cpu_hours),
                r.peak_memory_bytes
                    .map_or("-".to_string(), crate::client::format::memory),
                r.gpu_utilization_percent
                    .map_or("-".to_string(), |p| format!("{p:.1} %")),
            ]);
            cells
        })
        .collect();
    let mut out = format!(
        "Usage from {} to {}, by {}{} (instance-hours; LOST: work since the last checkpoint; WAIT: seconds RUNNABLE before capacity; CPU-H and PEAK MEM: what ended attempts used, the largest host; GPU UTIL: their GPUs' sampled mean)\n",
        utc(report.since),
        utc(report.until),
        report.by.as_str(),
        report
            .every
            .map(|e| format!(", every {}", e.as_str()))
            .unwrap_or_default()
    );
    if rows.is_empty() {
        out.push_str("No job held capacity and no share was entitled in this window.\n");
    } else {
        out.push_str(&table(&headers, &rows));
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// A period's label: its start's date (and hour, when periods are hours).
fn period(report: &UsageReport, row: &UsageRow) -> String {
    let start = utc(row.period_start);
    match report.every {
        None => "all".into(),
        Some(qm_api::qm::UsageEvery::Hour) => start[..16].replace('T', " "),
        Some(_) => start[..10].to_string(),
    }
}

/// The report as CSV, one line per row, every figure (instance- and GPU-hours) in its own
/// column, times in UTC.
pub fn usage_csv(report: &UsageReport) -> Result<String, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(csv_headers(report.by))?;
    for r in &report.rows {
        w.write_record(csv_record(report.by, r))?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The CSV's header line: the period, the row's key columns, then every figure.
fn csv_headers(by: UsageBy) -> Vec<String> {
    let mut headers: Vec<String> = vec!["period_start".into(), "period_end".into()];
    let keys: &[&str] = match by {
        UsageBy::Share => &["job_queue", "quota_share"],
        UsageBy::Principal => &["principal"],
        UsageBy::InstanceType => &["instance_type"],
    };
    headers.extend(keys.iter().map(|k| k.to_string()));
    for unit in ["instance_hours", "gpu_hours"] {
        for part in [
            "used",
            "within_entitlement",
            "borrowed",
            "lent_out",
            "idle_entitlement",
        ] {
            headers.push(format!("{unit}_{part}"));
        }
    }
    headers.extend(
        [
            "preemptions_suffered",
            "preemptions_caused",
            "lost_instance_hours",
            "lost_gpu_hours",
            "starts",
            "queue_delay_p50_s",
            "queue_delay_p90_s",
            "queue_delay_p99_s",
            "queue_delay_max_s",
            "cpu_hours",
            "peak_memory_bytes",
            "gpu_utilization_percent",
        ]
        .map(String::from),
    );
    headers
}

/// One row's CSV line, in the order of `csv_headers` (an absent figure is an empty cell).
fn csv_record(by: UsageBy, r: &UsageRow) -> Vec<String> {
    let mut rec = vec![utc(r.period_start), utc(r.period_end)];
    rec.extend(key_cells(by, r));
    for h in [&r.instance_hours, &r.gpu_hours] {
        for v in [
            h.used,
            h.within_entitlement,
            h.borrowed,
            h.lent_out,
            h.idle_entitlement,
        ] {
            rec.push(v.to_string());
        }
    }
    let q = r.queue_delay_seconds;
    rec.extend([
        r.preemptions_suffered.to_string(),
        r.preemptions_caused.to_string(),
        r.lost_instance_hours.to_string(),
        r.lost_gpu_hours.to_string(),
        r.starts.to_string(),
    ]);
    for v in [
        q.map(|q| q.p50),
        q.map(|q| q.p90),
        q.map(|q| q.p99),
        q.map(|q| q.max),
    ] {
        rec.push(v.map(|v| v.to_string()).unwrap_or_default());
    }
    rec.push(r.cpu_hours.to_string());
    rec.push(
        r.peak_memory_bytes
            .map(|b| b.to_string())
            .unwrap_or_default(),
    );
    rec.push(
        r.gpu_utilization_percent
            .map(|p| p.to_string())
            .unwrap_or_default(),
    );
    rec
}
