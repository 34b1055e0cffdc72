"""A SEAFL² schedule worked out by hand (SPEC "The server loop", steps 2-5), checked against the scheduler.

Three devices, all in flight (N = M = 3, so after each aggregation the devices that reported are the
only free ones and the selection draw cannot change who starts). K = 1, β = 1, E = 3, no upload time.
Epoch lengths are fixed: device 0 takes 1 s an epoch, device 1 takes 1.5 s, device 2 takes 4 s.
Nothing below comes from the project's own replay: every time is the arithmetic in the comments.
"""
from seafl_dist.sim import Scheduler

EPOCH_S = {0: 1.0, 1: 1.5, 2: 4.0}
E = 3


def plan(device, _job_index, start):
    return [start + e * EPOCH_S[device] for e in range(1, E + 1)]


def schedule(partial):
    sched = Scheduler(num_devices=3, concurrency=3, buffer_size=1, staleness_limit=1, partial=partial, plan=plan,
                      seed=0, n_samples=[10, 20, 30], max_aggregations=4)
    return list(sched.events())


def brief(ev):
    """(event, time, device or version, job, extra) without the keys the hand calculation does not need."""
    if ev["event"] == "start":
        return ("start", ev["time"], ev["device"], ev["job"], ev["version"], tuple(ev["epoch_ends"]))
    if ev["event"] in ("finish", "notify"):
        return (ev["event"], ev["time"], ev["device"], ev["job"], ev["epochs"])
    return ("aggregate", ev["time"], ev["version"],
            tuple((u["job"], u["staleness"], u["epochs"]) for u in ev["updates"]))


def test_seafl2_schedule_matches_the_hand_calculation():
    expected = [
        # t = 0, version 0: jobs 0, 1, 2 on devices 0, 1, 2; epoch ends start + e x epoch length
        ("start", 0.0, 0, 0, 0, (1.0, 2.0, 3.0)),
        ("start", 0.0, 1, 1, 0, (1.5, 3.0, 4.5)),
        ("start", 0.0, 2, 2, 0, (4.0, 8.0, 12.0)),
        # t = 3: job 0 done (3 x 1 s). Buffer 1 >= K. Blockers need t - t_k = 0 - 0 >= 1: none
        ("finish", 3.0, 0, 0, 3),
        ("aggregate", 3.0, 1, ((0, 0, 3),)),  # version 1; job 0 staleness 0 - 0 = 0
        ("start", 3.0, 0, 3, 1, (4.0, 5.0, 6.0)),  # device 0 again (the only free one), from version 1
        # t = 4.5: job 1 done (3 x 1.5 s). Version 1: job 2 (t_k = 0) has 1 - 0 = 1 >= beta: it blocks,
        # job 3 (t_k = 1) does not. SEAFL² notifies job 2 at tau = 4.5, in its 2nd epoch [4, 8):
        # it uploads at 8 with 2 epochs instead of at 12 with 3
        ("finish", 4.5, 1, 1, 3),
        ("notify", 4.5, 2, 2, 2),
        # t = 6: job 3 done (3 + 3 x 1 s); job 2 still blocks, buffer = [1, 3]
        ("finish", 6.0, 0, 3, 3),
        # t = 8: job 2's early upload; nothing in flight blocks: aggregate the whole buffer
        ("finish", 8.0, 2, 2, 2),
        ("aggregate", 8.0, 2, ((1, 1, 3), (3, 0, 3), (2, 1, 2))),  # staleness 1 - 0, 1 - 1, 1 - 0
        # all three devices are free: jobs 4, 5, 6 from version 2 at t = 8
        ("start", 8.0, 0, 4, 2, (9.0, 10.0, 11.0)),
        ("start", 8.0, 1, 5, 2, (9.5, 11.0, 12.5)),
        ("start", 8.0, 2, 6, 2, (12.0, 16.0, 20.0)),
        # t = 11: job 4 done; blockers at version 2 need 2 - t_k >= 1, but jobs 5, 6 have t_k = 2
        ("finish", 11.0, 0, 4, 3),
        ("aggregate", 11.0, 3, ((4, 0, 3),)),
        ("start", 11.0, 0, 7, 3, (12.0, 13.0, 14.0)),
        # t = 12.5: job 5 done; version 3: job 6 (t_k = 2) has 3 - 2 = 1 >= beta, notified in its
        # 2nd epoch [12, 16): uploads at 16 with 2 epochs
        ("finish", 12.5, 1, 5, 3),
        ("notify", 12.5, 2, 6, 2),
        ("finish", 14.0, 0, 7, 3),  # 11 + 3 x 1 s
        ("finish", 16.0, 2, 6, 2),
        ("aggregate", 16.0, 4, ((5, 1, 3), (7, 0, 3), (6, 1, 2))),  # 3 - 2, 3 - 3, 3 - 2
        # the stream ends after max_aggregations = 4, with the jobs that aggregation started
        ("start", 16.0, 0, 8, 4, (17.0, 18.0, 19.0)),
        ("start", 16.0, 1, 9, 4, (17.5, 19.0, 20.5)),
        ("start", 16.0, 2, 10, 4, (20.0, 24.0, 28.0)),
    ]
    assert [brief(e) for e in schedule(partial=True)] == expected


def test_plain_seafl_waits_for_the_whole_job():
    """Without notifications job 2 runs all 3 epochs (to 12 s): the 2nd aggregation lands 4 s later."""
    aggs = [brief(e) for e in schedule(partial=False) if e["event"] == "aggregate"]
    assert aggs[0] == ("aggregate", 3.0, 1, ((0, 0, 3),))
    # t = 4.5 job 1, t = 6 job 3 wait for job 2, which finishes at 3 x 4 s = 12 with 3 epochs
    assert aggs[1] == ("aggregate", 12.0, 2, ((1, 1, 3), (3, 0, 3), (2, 1, 3)))
