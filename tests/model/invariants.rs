//! The invariants, checked as the stream plays: per enforced limit and window,
//! admitted ≤ the algorithm's bound (`oracle::check`, per segment between resets and
//! reloads); nothing served while its caller is blocked; a penalty box trips exactly
//! when its rule says; the layer holds at most `max_held` requests. (Per request,
//! given back ≤ charged is the `Ledger`'s, in `tests/support/model.rs`.)

use std::collections::HashMap;

use tollgate::{Algorithm, Key, RateLimitLayer};

use crate::oracle::{self, Admission, BoxModel};
use crate::policies::{CaseSpec, MeterSpec, PolicySpec, StoreSpec};
use crate::runner::{Answer, key_of};
use crate::service::{Served, Spelled, parse_rejection};
use crate::streams::{Leave, Operator, RequestSpec};

/// One request as the model saw it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub(crate) spec: RequestSpec,
    pub(crate) answer: Answer,
    /// What the handler saw, if it was called.
    pub(crate) served: Option<Served>,
    pub(crate) group: u64,
}

/// An answer as the memory ≡ Redis comparison reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Comparable {
    /// The status (or an operator call's answer).
    head: String,
    retry_after: String,
    /// The rate-limit headers.
    headers: String,
    decisions: Vec<Spelled>,
}

impl Comparable {
    pub(crate) fn text(text: &str) -> Self {
        Self {
            head: text.to_string(),
            retry_after: String::new(),
            headers: String::new(),
            decisions: Vec::new(),
        }
    }

    /// Whether two stores answered alike. A denial the Redis store answers from its
    /// denial cache decides only the denying policy (the others are not evaluated and
    /// leave the headers, as DESIGN.md says) and dates from the cached denial (its
    /// `Retry-After` at most the cache's age): then the status and the verdicts of
    /// what both decided are compared.
    pub(crate) fn alike(&self, other: &Self) -> bool {
        let whole = |c: &Self| c.decisions.iter().all(|d| d.evaluated);
        if self.head != other.head {
            return false;
        }
        if whole(self) && whole(other) {
            return self == other;
        }
        self.decisions.iter().all(|d| {
            !d.evaluated
                || other
                    .decisions
                    .iter()
                    .find(|e| e.limit == d.limit)
                    .is_none_or(|e| {
                        !e.evaluated || (e.allowed, e.blocked) == (d.allowed, d.blocked)
                    })
        })
    }
}

/// One policy and one key.
#[derive(Debug)]
struct Track {
    name: &'static str,
    key: Key,
    algorithm: Algorithm,
    /// This segment's admissions.
    admissions: Vec<Admission>,
    penalty_box: BoxModel,
    /// Units counted since the last reset (admissions that stand, penalties).
    committed: u64,
}

/// The model's state for one run, and what broke.
pub(crate) struct Invariants {
    case: CaseSpec,
    layer: RateLimitLayer,
    now_us: u64,
    set: usize,
    tracks: HashMap<(&'static str, [u8; 16]), Track>,
    /// Tracks a step touched, whose boxes are checked after it.
    touched: Vec<(&'static str, [u8; 16])>,
    violations: Vec<String>,
    loose: bool,
}

impl Invariants {
    pub(crate) fn new(case: &CaseSpec, layer: RateLimitLayer, now_us: u64) -> Self {
        Self {
            case: case.clone(),
            layer,
            now_us,
            set: 0,
            tracks: HashMap::new(),
            touched: Vec::new(),
            violations: Vec::new(),
            // Settles land in the background on a remote store: an overshoot may
            // meet later decisions.
            loose: case.store == StoreSpec::Redis || case.tcp,
        }
    }

    /// The policy set in force (its index in the case's sets).
    pub(crate) fn set(&self) -> usize {
        self.set
    }

    fn spec(&self, name: &str) -> Option<PolicySpec> {
        self.case.sets[self.set]
            .iter()
            .find(|p| p.name == name)
            .cloned()
    }

    fn track(&mut self, spec: &PolicySpec, key: &Key) -> &mut Track {
        let id = (spec.name, key.fingerprint());
        if !self.touched.contains(&id) {
            self.touched.push(id);
        }
        self.tracks.entry(id).or_insert_with(|| Track {
            name: spec.name,
            key: *key,
            algorithm: spec.algorithm,
            admissions: Vec::new(),
            penalty_box: BoxModel::default(),
            committed: 0,
        })
    }

    /// What a client saw: status, rate-limit headers and every decision, as a line
    /// to print and as what the memory ≡ Redis comparison reads.
    pub(crate) fn answer_line(&self, seen: &Seen) -> (String, Comparable) {
        let Answer::Response {
            status,
            headers,
            body,
        } = &seen.answer
        else {
            return ("left".to_string(), Comparable::text("left"));
        };
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let decisions: Vec<Spelled> = match &seen.served {
            Some(served) if served.finished && !served.read_failed => {
                served.decisions.iter().map(Spelled::of).collect()
            }
            _ => parse_rejection(body).map(|(_, d)| d).unwrap_or_default(),
        };
        let comparable = Comparable {
            head: status.to_string(),
            retry_after: header("retry-after"),
            // A metered figure known before the head, and a `count_when` refund, are
            // settled before the headers are written where the store answers at once,
            // after them on Redis (README, "Metered limits"): there the `RateLimit`
            // header differs by design.
            headers: if self
                .case
                .has(|p| p.meter != MeterSpec::Plain || p.count_failures)
            {
                format!("policy={}", header("ratelimit-policy"))
            } else {
                format!(
                    "ratelimit={} policy={}",
                    header("ratelimit"),
                    header("ratelimit-policy")
                )
            },
            decisions,
        };
        let line = format!(
            "{} retry-after={} {} {:?}",
            comparable.head, comparable.retry_after, comparable.headers, comparable.decisions
        );
        (line, comparable)
    }

    /// Books one answered request.
    #[allow(
        clippy::too_many_lines,
        reason = "one pass over the set: the bound's books and the box's, side by side"
    )]
    pub(crate) fn observe(&mut self, seen: &Seen) {
        let left = matches!(seen.answer, Answer::Left);
        let rejection = match &seen.answer {
            Answer::Response { body, .. } => parse_rejection(body),
            Answer::Left => None,
        };
        let served = seen
            .served
            .as_ref()
            .filter(|s| s.finished && !s.read_failed && !left);
        let unknown = left
            || seen.served.as_ref().is_some_and(|s| s.read_failed)
            || rejection
                .as_ref()
                .is_some_and(|(reason, _)| reason != "RateLimited");
        for spec in self.case.sets[self.set].clone() {
            let Some(key) = key_of(&self.layer, spec.name, seen.spec.user) else {
                continue;
            };
            let enforced = self
                .layer
                .policy(spec.name)
                .is_some_and(|p| p.enforces(&key));
            let now = self.now_us;
            let loose = self.loose;
            let served_decision =
                served.and_then(|s| s.decisions.iter().find(|d| d.limit == spec.name).cloned());
            let spelled = match (&served_decision, &rejection) {
                (Some(d), _) => Some(Spelled::of(d)),
                (None, Some((_, decisions))) => {
                    decisions.iter().find(|d| d.limit == spec.name).cloned()
                }
                (None, None) => None,
            };
            let mut broken = None;
            let track = self.track(&spec, &key);
            if unknown {
                track.penalty_box.uncertain = true;
            }
            if let (Some(served), Some(d)) = (served, &served_decision)
                && d.allowed
                && d.evaluated()
            {
                let (units, overshoot) = units(&spec, &seen.spec, served);
                // What the library may have kept (a shadowed policy charges as an
                // enforced one would): a response dropped mid-body counts in full for
                // the box's rule (the bound takes the low figure).
                track.committed += if matches!(seen.spec.leave, Leave::MidBody(_)) {
                    let whole = RequestSpec {
                        leave: Leave::Never,
                        ..seen.spec.clone()
                    };
                    units_of(&spec, &whole, served).0
                } else {
                    units
                };
                if enforced {
                    if units > 0
                        && track
                            .penalty_box
                            .blocked_until
                            .is_some_and(|until| until > now)
                        && !track.penalty_box.uncertain
                    {
                        broken = Some(format!(
                            "policy {} served a request of u{} while its key is blocked",
                            spec.name, seen.spec.user
                        ));
                    }
                    track.admissions.push(Admission {
                        at_us: now + d.delay.as_micros() as u64,
                        units,
                        overshoot,
                        group: seen.group,
                        lingering: seen.spec.leave == Leave::Linger || loose,
                        limit: d.quota.limit(),
                        burst: d.quota.burst(),
                        period_us: d.quota.period().as_micros() as u64,
                        spread_us: if spec.meter == MeterSpec::RequestBytes {
                            spec.wait.map_or(0, |w| w.as_micros() as u64)
                        } else {
                            0
                        },
                    });
                }
            }
            // The rejection that trips the box is answered as a block already: it
            // counts, once per step; a rejection of a key the model knows is blocked
            // does not.
            let known_block = track
                .penalty_box
                .blocked_until
                .is_some_and(|until| until > now);
            if spec.penalty.is_some()
                && let Some(d) = &spelled
                && !d.allowed
                && d.evaluated
                && (!d.blocked || !(known_block || track.penalty_box.trip_seen))
            {
                if d.blocked {
                    track.penalty_box.trip_seen = true;
                }
                // Under `count_when`, a rejection the counted usage cannot explain was
                // refused only for charges still awaiting their outcome: no offence.
                let genuine =
                    !spec.count_failures || track.committed + u64::from(spec.cost) > d.capacity;
                if genuine {
                    track.penalty_box.counted += 1;
                }
            }
            if let Some(broken) = broken {
                self.violations.push(broken);
            }
        }
    }

    /// A burst's requests that neither finished nor reached the handler are held by
    /// the layer: at most `max_held` of them, and `held()` says so.
    pub(crate) fn held(&mut self, pending: usize, held: usize) {
        if self.case.max_held < 1024 && (pending > self.case.max_held || held > self.case.max_held)
        {
            self.violations.push(format!(
                "{pending} requests held at once (layer.held() says {held}) where max_held is {}",
                self.case.max_held
            ));
        }
    }

    pub(crate) fn advance(&mut self, us: u64) {
        self.now_us += us;
    }

    /// A reload: every account starts a new segment under the new set.
    pub(crate) fn reload(&mut self, set: usize) {
        let ids: Vec<_> = self.tracks.keys().copied().collect();
        for id in ids {
            self.end_segment(id);
        }
        self.set = set;
        for track in self.tracks.values_mut() {
            if let Some(spec) = self.case.sets[set].iter().find(|p| p.name == track.name) {
                track.algorithm = spec.algorithm;
            }
        }
    }

    pub(crate) fn operated(&mut self, name: &'static str, key: &Key, call: Operator) {
        let Some(spec) = self.spec(name) else { return };
        let now = self.now_us;
        let id = (spec.name, key.fingerprint());
        match call {
            Operator::Block { ms } => {
                let track = self.track(&spec, key);
                track.penalty_box.blocked_until = (ms > 0).then(|| now + ms * 1_000);
                // Whether an operator's block (or its lift) keeps the rejections
                // counted towards the next trip is not said anywhere (only that it
                // keeps the trips): the box's trip is not checked until a reset.
                track.penalty_box.uncertain = true;
            }
            Operator::Reset => {
                self.track(&spec, key);
                self.end_segment(id);
                let track = self.track(&spec, key);
                track.penalty_box = BoxModel::default();
                track.committed = 0;
            }
            Operator::Penalize { units } => {
                self.track(&spec, key).committed += u64::from(units);
            }
        }
    }

    /// After each step: every penalty box (and operator block) the step touched is
    /// where the model says, asked of the limiter with a peek.
    pub(crate) async fn check_boxes(&mut self, step: u64) {
        let touched = std::mem::take(&mut self.touched);
        for id in touched {
            let Some(spec) = self.spec(id.0) else {
                continue;
            };
            let Some(track) = self.tracks.get(&id) else {
                continue;
            };
            let key = track.key;
            let Ok(peek) = self.layer.limiter().peek(spec.name, &key).await else {
                if let Some(track) = self.tracks.get_mut(&id) {
                    track.penalty_box.uncertain = true;
                }
                continue;
            };
            let now = self.now_us;
            let leased = self.case.leased;
            let track = self.tracks.get_mut(&id).expect("a track");
            let b = &mut track.penalty_box;
            b.trip_seen = false;
            if b.blocked_until.is_some_and(|until| until <= now) {
                b.blocked_until = None;
            }
            let trips = spec.penalty.is_some_and(|p| b.counted >= p.after);
            let after = spec.penalty.map_or(0, |p| p.after);
            let mut broken = None;
            match (trips, peek.blocked_for) {
                (true, Some(blocked)) => {
                    b.blocked_until = Some(now + blocked.as_micros() as u64);
                    b.counted = 0;
                }
                (true, None) => {
                    if !b.uncertain && !spec.count_failures && !leased {
                        broken = Some(format!(
                            "step {step}: policy {}'s box did not trip after {} rejections (rule: {after})",
                            spec.name, b.counted
                        ));
                    }
                    b.uncertain = true;
                }
                (false, Some(blocked)) => {
                    if b.blocked_until.is_none() && !b.uncertain {
                        broken = Some(format!(
                            "step {step}: policy {}'s key is blocked for {blocked:?} after {} counted rejections (rule: {after})",
                            spec.name, b.counted
                        ));
                    }
                    b.blocked_until = Some(now + blocked.as_micros() as u64);
                    b.counted = 0;
                }
                (false, None) => {
                    if b.blocked_until.is_some() && !b.uncertain {
                        broken = Some(format!(
                            "step {step}: policy {}'s block ended early (model: until {:?} µs, now {now} µs)",
                            spec.name, b.blocked_until
                        ));
                    }
                    b.blocked_until = None;
                }
            }
            if let Some(broken) = broken {
                self.violations.push(broken);
            }
        }
    }

    fn end_segment(&mut self, id: (&'static str, [u8; 16])) {
        let loose = self.loose;
        let Some(track) = self.tracks.get_mut(&id) else {
            return;
        };
        let admissions = std::mem::take(&mut track.admissions);
        if let Some(broken) = oracle::check(track.algorithm, &admissions, loose) {
            self.violations.push(format!(
                "policy {} (key {:.8}): {broken}",
                track.name,
                track.key.to_hex()
            ));
        }
    }

    /// Ends every segment; every violation found.
    pub(crate) fn finish(mut self) -> Vec<String> {
        let ids: Vec<_> = self.tracks.keys().copied().collect();
        for id in ids {
            self.end_segment(id);
        }
        self.violations
    }
}

/// What a served request still counts for under `spec`, and how far its actual went
/// beyond its estimate. Never more than the library may keep: a response dropped
/// mid-body counts 0 (whether its charge stands is the library's to say).
fn units(spec: &PolicySpec, request: &RequestSpec, served: &Served) -> (u64, u64) {
    if matches!(request.leave, Leave::MidBody(_)) {
        return (0, 0);
    }
    units_of(spec, request, served)
}

/// What a request that read its whole response counts for under `spec`.
fn units_of(spec: &PolicySpec, request: &RequestSpec, served: &Served) -> (u64, u64) {
    let cost = u64::from(spec.cost);
    if spec.count_failures && request.status < 400 {
        return (0, 0);
    }
    match spec.meter {
        MeterSpec::Plain => (cost, 0),
        MeterSpec::Metered { max_actual } => {
            let units = request.actual.map_or(cost, |a| a.min(max_actual));
            (units, units.saturating_sub(cost))
        }
        MeterSpec::RequestBytes => (served.bytes, 0),
    }
}
