//! Admin connections: `ccroute status` asks, the scheduler answers with a
//! snapshot of its routes, agents, consumerds, totals and optimizer state.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use ccroute_wire::{AgentStatus, ConsumerdStatus, Message, Query, Reply, RouteStatus, StatusReport, Welcome};

use super::ServerState;
use crate::net::{CloseReason, ServerHandshake};

/// Serves one admin connection: one answer per query, until it closes.
pub(crate) async fn serve(state: Arc<ServerState>, conn: quinn::Connection, hs: ServerHandshake) {
    let welcome = Welcome { scheduler_id: state.id, limit: 0 };
    let Ok((writer, mut reader)) = hs.welcome(welcome, &ServerState::control_stream()).await else {
        return;
    };
    loop {
        match reader.next().await {
            Ok(Some(frame)) => match frame.message {
                Message::Query(Query::Status) => {
                    let reply = Message::Reply(Box::new(Reply::Status(report(&state))));
                    if writer.send(reply, Bytes::new()).await.is_err() {
                        return;
                    }
                }
                other => {
                    let why = format!("an admin may not send a {}", other.name());
                    tracing::warn!(error = %why, "closing the admin connection");
                    CloseReason::ProtocolError.close_with(&conn, &why);
                    return;
                }
            },
            Ok(None) => {
                let _ = writer.finish().await;
                return;
            }
            Err(_) => return,
        }
    }
}

/// A snapshot of the whole scheduler.
pub(crate) fn report(state: &ServerState) -> StatusReport {
    let s = &state.scheduler;
    let decisions = state.optimizer.as_ref().map(|o| o.decisions()).unwrap_or_default();
    let mut totals = s.totals();
    totals.retried += state.counters.over_budget.load(Ordering::Relaxed);
    totals.requests += state.counters.over_budget.load(Ordering::Relaxed);
    totals.adopted = state.resumes.counts().0;
    StatusReport {
        scheduler_id: state.id,
        uptime_s: state.started.elapsed().as_secs(),
        routes: s
            .routes()
            .into_iter()
            .map(|r| RouteStatus {
                toolchain: r.toolchain,
                description: r.description,
                shipped_to: state.shipping.shipped_to(r.toolchain, &r.agents),
                agents: r.agents,
                consumerds: r.consumerds,
                queued: r.queued as u64,
            })
            .collect(),
        agents: s
            .agents()
            .into_iter()
            .map(|a| {
                let d = decisions.get(&a.id);
                AgentStatus {
                    node_id: a.node_id,
                    host_name: a.host_name,
                    tokens_in_use: a.tokens_in_use,
                    token_limit: a.token_limit,
                    max_limit: a.max_limit,
                    assigned: a.assigned,
                    completed: a.completed,
                    failed: a.failed,
                    cpu_use: d.and_then(|d| d.cpu_use).unwrap_or(0.0) as f32,
                    throttled: d.and_then(|d| d.throttled).unwrap_or(0.0) as f32,
                    last_decision: d.map(|d| d.reason.clone()).unwrap_or_default(),
                    shipping: state.shipping.agent_state(a.node_id),
                    tasks_started: a.tasks_started,
                    speed_milli: a.speed,
                    copies_started: a.hedged,
                    copies_won: a.copies_won,
                }
            })
            .collect(),
        consumerds: s
            .consumerds()
            .into_iter()
            .map(|c| ConsumerdStatus {
                node_id: c.node_id,
                host_name: c.host_name,
                submitted: c.submitted,
                in_flight: c.in_flight,
                remote_limit: c.remote_limit,
                intercepted: c.intercepted,
            })
            .collect(),
        totals,
        cache: state.cache.as_ref().map(super::CacheHook::status),
        payload_bytes: state.budget.used(),
        payload_budget: state.budget.limit(),
        costs: {
            let a = state.costs.accuracy();
            ccroute_wire::CostStatus {
                units: a.units as u64,
                predictions: a.predictions,
                from_history: a.from_history,
                median_error: a.median_error.map(|e| e as f32),
            }
        },
    }
}
