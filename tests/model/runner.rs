//! Runs one case: builds its store and layer, plays its stream step by step against
//! the injected clock, and hands every answer to the invariants.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::Full;
use support::model::{Flaky, Ledger};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tollgate::clock::ManualClock;
use tollgate::layer::MeterBytes;
use tollgate::store::{Fallback, LeasedStore, Store};
use tollgate::{Key, MemoryStore, RateLimitLayer};
use tower::{ServiceBuilder, ServiceExt};

use crate::invariants::{Comparable, Invariants, Seen};
use crate::policies::{CaseSpec, PolicySpec, StoreSpec};
use crate::service::{self, Chunks, Log};
use crate::streams::{Leave, Operator, RequestSpec, Step};

/// The clock's start: a whole minute, so that every window starts aligned.
pub(crate) const BASE: Duration = Duration::from_secs(1_699_920_000);

/// What one run found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) violations: Vec<String>,
    /// Per request and operator call, in stream order: what a client saw (the
    /// memory ≡ Redis comparison reads these).
    pub(crate) answers: Vec<String>,
    /// The same answers, as the comparison reads them.
    pub(crate) compared: Vec<Comparable>,
    pub(crate) requests: u64,
    /// The layer refused the policy set at build (the case is skipped).
    pub(crate) refused: Option<String>,
}

/// How a request came back.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// The client went away before the response head.
    Left,
    Response {
        status: u16,
        headers: HeaderMap,
        /// The body, when it was read (rejections always are).
        body: String,
    },
}

type Switch = Arc<dyn Fn(bool) + Send + Sync>;

/// What sends requests: shared by the tasks of a burst.
#[derive(Clone)]
struct Client {
    layer: RateLimitLayer,
    log: Log,
    server: Option<Arc<support::http::Server>>,
    close: Arc<watch::Sender<u64>>,
    lingering: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

fn user_request<B>(id: u64, spec: &RequestSpec, body: B) -> Request<B> {
    let mut request = Request::post("/model")
        .header("x-req", id.to_string())
        .header("x-user", format!("u{}", spec.user))
        .header("x-status", spec.status.to_string())
        .header("x-work-ms", spec.work_ms.to_string());
    if spec.user == 1 {
        request = request.header("x-plan", "pro");
    }
    if let Some(actual) = spec.actual {
        request = request.header("x-actual", actual.to_string());
    }
    request.body(body).expect("a request")
}

/// Polls `future` at most `polls` times: `None` when the client gave up first.
async fn within_polls<F: Future>(future: F, polls: u32) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    let mut left = polls;
    std::future::poll_fn(move |cx| {
        if left == 0 {
            return Poll::Ready(None);
        }
        left -= 1;
        match future.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if left == 0 => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

impl Client {
    async fn send(&self, id: u64, spec: &RequestSpec) -> Answer {
        match &self.server {
            None => self.send_in_process(id, spec).await,
            Some(server) => self.send_over_tcp(server, id, spec).await,
        }
    }

    async fn send_in_process(&self, id: u64, spec: &RequestSpec) -> Answer {
        let log = self.log.clone();
        let service = ServiceBuilder::new()
            .layer(self.layer.clone())
            .layer(MeterBytes::new().map_request_body(Body::new))
            .service(tower::service_fn(move |request| {
                service::handle(log.clone(), request)
            }));
        let chunks = spec
            .body
            .iter()
            .map(|n| Bytes::from(vec![b'x'; *n]))
            .collect();
        let request = user_request(id, spec, Body::new(Chunks(chunks)));
        let call = service.oneshot(request);
        let response = match spec.leave {
            Leave::AfterPolls(polls) => match within_polls(call, polls).await {
                Some(response) => response,
                None => return Answer::Left,
            },
            _ => call.await,
        };
        let Ok(response) = response;
        let (parts, body) = response.into_parts();
        self.answer(id, spec, parts.status.as_u16(), parts.headers, body)
            .await
    }

    async fn send_over_tcp(
        &self,
        server: &support::http::Server,
        id: u64,
        spec: &RequestSpec,
    ) -> Answer {
        let bytes: Vec<u8> = spec.body.iter().flat_map(|n| vec![b'x'; *n]).collect();
        let request = user_request(id, spec, Full::new(Bytes::from(bytes)));
        let call = server.open(request);
        let response = match spec.leave {
            Leave::AfterPolls(polls) => match within_polls(call, polls).await {
                Some(response) => response,
                None => return Answer::Left,
            },
            _ => call.await,
        };
        let Ok(response) = response else {
            return Answer::Left;
        };
        let (parts, body) = response.into_parts();
        self.answer(id, spec, parts.status.as_u16(), parts.headers, body)
            .await
    }

    /// Reads the body as the client would: whole for a rejection, else as `leave` says.
    async fn answer<B>(
        &self,
        id: u64,
        spec: &RequestSpec,
        status: u16,
        headers: HeaderMap,
        body: B,
    ) -> Answer
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
    {
        let served = self
            .log
            .lock()
            .expect("the log")
            .get(&id)
            .is_some_and(|s| s.finished && !s.read_failed);
        let frames = match spec.leave {
            _ if !served => None,
            Leave::MidBody(frames) => Some(frames),
            Leave::Linger => {
                let mut closed = self.close.subscribe();
                let epoch = *closed.borrow();
                let task = tokio::spawn(async move {
                    let _ = closed.wait_for(|now| *now > epoch).await;
                    service::read(body, None).await;
                });
                self.lingering.lock().expect("lingering").push(task);
                return Answer::Response {
                    status,
                    headers,
                    body: String::new(),
                };
            }
            _ => None,
        };
        let (bytes, _) = service::read(body, frames).await;
        Answer::Response {
            status,
            headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// Ends every lingering response and waits for them.
    async fn close(&self) {
        self.close.send_modify(|epoch| *epoch += 1);
        let tasks: Vec<_> = std::mem::take(&mut *self.lingering.lock().expect("lingering"));
        for task in tasks {
            let _ = task.await;
        }
    }
}

fn leased_or_not<S: Store>(store: S, case: &CaseSpec, clock: &ManualClock) -> Ledger {
    if case.leased {
        Ledger::new(LeasedStore::builder(store).clock(clock.clone()).build())
    } else {
        Ledger::new(store)
    }
}

fn wrap<S: Store + Clone>(
    base: S,
    case: &CaseSpec,
    clock: &ManualClock,
) -> (Ledger, Option<Switch>) {
    if case.fallback {
        let primary = Flaky::new(base);
        let fallback = Fallback::new(primary.clone(), MemoryStore::with_clock(clock.clone()))
            .probe_interval(Duration::ZERO);
        let switch: Switch = Arc::new(move |down| primary.set_down(down));
        (leased_or_not(fallback, case, clock), Some(switch))
    } else {
        (leased_or_not(base, case, clock), None)
    }
}

fn store(case: &CaseSpec, clock: &ManualClock) -> (Ledger, Option<Switch>) {
    match case.store {
        StoreSpec::Memory => wrap(MemoryStore::with_clock(clock.clone()), case, clock),
        StoreSpec::Redis => redis_store(case, clock),
    }
}

#[cfg(feature = "redis")]
fn redis_store(case: &CaseSpec, clock: &ManualClock) -> (Ledger, Option<Switch>) {
    use support::redis_server::{shared_server, unique_prefix};
    let redis = tollgate::RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(&unique_prefix("model"))
        // Answers are checked here, not speed, on a busy machine.
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock.clone());
    wrap(redis, case, clock)
}

#[cfg(not(feature = "redis"))]
fn redis_store(_: &CaseSpec, _: &ManualClock) -> (Ledger, Option<Switch>) {
    unreachable!("the Redis cases run with the redis feature only")
}

/// The policies of one set, built.
fn policies(set: &[PolicySpec]) -> Vec<tollgate::Policy> {
    set.iter().map(PolicySpec::build).collect()
}

/// Runs `steps` of `case` on a fresh store and layer.
#[allow(
    clippy::too_many_lines,
    reason = "the step loop reads as a stream does: one arm per kind of step"
)]
pub(crate) async fn run(case: &CaseSpec, steps: &[Step]) -> Report {
    let clock = ManualClock::new(BASE);
    let (ledger, switch) = store(case, &clock);
    let layer = match RateLimitLayer::builder()
        .policies(policies(&case.sets[0]))
        .store(ledger.clone())
        .build()
    {
        Ok(layer) => layer,
        Err(refused) => {
            return Report {
                refused: Some(refused.to_string()),
                ..Report::default()
            };
        }
    };
    let layer = layer
        .rejection(service::rejection())
        .max_held(case.max_held)
        .max_held_per_key(case.max_held_per_key);
    let log: Log = Arc::default();
    let tcp_server = if case.tcp {
        let handler_log = log.clone();
        let app = Router::new()
            .fallback_service(tower::service_fn(move |request| {
                service::handle(handler_log.clone(), request)
            }))
            .layer(MeterBytes::new().map_request_body(Body::new))
            .layer(layer.clone());
        Some(Arc::new(support::http::Server::start(app).await))
    } else {
        None
    };
    let client = Client {
        layer: layer.clone(),
        log: log.clone(),
        server: tcp_server,
        close: Arc::new(watch::channel(0).0),
        lingering: Arc::default(),
    };
    let mut model = Invariants::new(case, layer.clone(), BASE.as_micros() as u64);
    let mut report = Report::default();
    let mut next_id = 0_u64;
    let remote = case.store == StoreSpec::Redis || case.tcp;
    for (group, step) in steps.iter().enumerate() {
        let group = group as u64;
        match step {
            Step::Request(spec) => {
                next_id += 1;
                let answer = client.send(next_id, spec).await;
                report.requests += 1;
                settle(&ledger, remote).await;
                let served = log.lock().expect("the log").get(&next_id).cloned();
                let seen = Seen {
                    spec: spec.clone(),
                    answer,
                    served,
                    group,
                };
                let (line, comparable) = model.answer_line(&seen);
                report.answers.push(line);
                report.compared.push(comparable);
                model.observe(&seen);
            }
            Step::Burst(specs) => {
                let ids = (next_id + 1..).take(specs.len()).collect();
                next_id += specs.len() as u64;
                let answers = burst(&client, case, &mut model, ids, specs).await;
                report.requests += answers.len() as u64;
                settle(&ledger, remote).await;
                for (id, spec, answer) in answers {
                    let served = log.lock().expect("the log").get(&id).cloned();
                    let seen = Seen {
                        spec,
                        answer,
                        served,
                        group,
                    };
                    let line = model.answer_line(&seen).0;
                    report
                        .answers
                        .push(format!("(burst) u{} {line}", seen.spec.user));
                    model.observe(&seen);
                }
            }
            Step::Advance(by) => {
                clock.advance(*by);
                model.advance(by.as_micros() as u64);
            }
            Step::Reload(set) => {
                let result = layer.reload(policies(&case.sets[*set]));
                let line = format!("reload {set}: {}", result.is_ok());
                report.compared.push(Comparable::text(&line));
                report.answers.push(line);
                if result.is_ok() {
                    model.reload(*set);
                }
            }
            Step::Operate { policy, user, call } => {
                if let Some(line) = operate(&layer, &mut model, case, *policy, *user, *call).await {
                    report.compared.push(Comparable::text(&line));
                    report.answers.push(line);
                }
            }
            Step::Flap(down) => {
                if let Some(switch) = &switch {
                    switch(*down);
                }
            }
            Step::Close => {
                client.close().await;
                settle(&ledger, remote).await;
            }
        }
        model.check_boxes(group).await;
    }
    client.close().await;
    ledger
        .settled(Duration::from_millis(5), Duration::from_secs(5))
        .await;
    report.violations = model.finish();
    report.violations.extend(ledger.violations());
    report
}

/// Sends `specs` at once; on the memory store, counts the requests the layer holds
/// 15 ms in (neither answered nor in the handler) for the `max_held` invariant.
async fn burst(
    client: &Client,
    case: &CaseSpec,
    model: &mut Invariants,
    ids: Vec<u64>,
    specs: &[RequestSpec],
) -> Vec<(u64, RequestSpec, Answer)> {
    let mut tasks = Vec::new();
    let mut done = Vec::new();
    for (id, spec) in ids.into_iter().zip(specs) {
        let (client, spec) = (client.clone(), spec.clone());
        let finished = Arc::new(AtomicBool::new(false));
        done.push((id, finished.clone()));
        tasks.push(tokio::spawn(async move {
            let answer = client.send(id, &spec).await;
            finished.store(true, Ordering::SeqCst);
            (id, spec, answer)
        }));
    }
    if case.store == StoreSpec::Memory && !case.tcp {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let pending = done
            .iter()
            .filter(|(id, finished)| {
                !finished.load(Ordering::SeqCst)
                    && !client.log.lock().expect("the log").contains_key(id)
            })
            .count();
        model.held(pending, client.layer.held());
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("a request task"));
    }
    answers
}

/// Waits for the background settles and refunds of a remote store to land.
async fn settle(ledger: &Ledger, remote: bool) {
    if remote {
        ledger
            .settled(Duration::from_millis(3), Duration::from_secs(5))
            .await;
    } else {
        tokio::task::yield_now().await;
    }
}

/// The key `user` has under `policy` (what its requests are charged to).
pub(crate) fn key_of(layer: &RateLimitLayer, policy: &str, user: u64) -> Option<Key> {
    let (parts, ()) = Request::post("/model")
        .header("x-user", format!("u{user}"))
        .body(())
        .expect("a request")
        .into_parts();
    layer.policy(policy)?.key_of(&parts)
}

async fn operate(
    layer: &RateLimitLayer,
    model: &mut Invariants,
    case: &CaseSpec,
    policy: usize,
    user: u64,
    call: Operator,
) -> Option<String> {
    let spec = case.sets[model.set()].get(policy)?;
    let key = key_of(layer, spec.name, user)?;
    let limiter = layer.limiter();
    let line = match call {
        Operator::Block { ms } => {
            let result = limiter
                .block(spec.name, &key, Duration::from_millis(ms))
                .await;
            format!(
                "block {} u{user} {ms}ms: {:?}",
                spec.name,
                result.map(|d| d.remaining)
            )
        }
        Operator::Reset => {
            let result = limiter.reset(spec.name, &key).await;
            format!("reset {} u{user}: {}", spec.name, result.is_ok())
        }
        Operator::Penalize { units } => {
            let result = limiter.penalize(spec.name, &key, units).await;
            format!(
                "penalize {} u{user} {units}: {:?}",
                spec.name,
                result.map(|d| (d.allowed, d.remaining))
            )
        }
    };
    model.operated(spec.name, &key, call);
    Some(line)
}
