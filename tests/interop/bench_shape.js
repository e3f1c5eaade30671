'use strict';

// One side of RocketMQ's benchmark shape driven through ali-ons: bench/ali_ons_shape.py starts a
// producer and a consumer of this script (two processes, as RocketMQ's benchmark Producer and
// Consumer are two JVMs) and tells them, on stdin, when to stop and which window to report.
//
//   node bench_shape.js --role producer --namesrv HOST:PORT --topic TOPIC --inflight N
//   node bench_shape.js --role consumer --namesrv HOST:PORT --topic TOPIC --queues Q
//
// producer: one ali-ons Producer (one connection to the broker) and N loops that each send a
//   1 KiB message with a key (the second of the send, as `-k true` sets it), wait for its
//   answer and send the next, so N sync sends are in flight; queues round-robin (ali-ons').
//   Prints {"event": "ready"} once the first send was answered, then sends until stdin says
//   "stop" ({"event": "stopped"} once the last in-flight send is answered).
// consumer: one ali-ons push Consumer in cluster mode (its own connection, ali-ons' defaults:
//   pulls of 32 held 15 s, offsets persisted every 5 s), subscribed to every tag. Prints
//   {"event": "ready"} once it holds all Q queues. Records, per message, its receipt time and
//   born timestamp.
// Both, on "report T0 T1 W" (epoch milliseconds, window seconds): print one JSON line with what
// happened in [T0, T1) and exit: the producer its sends answered (count, RT average / p50 / p99
// in ms, failures, answers per W-second window), the consumer its messages received (count,
// born-to-consume latency p50 / p99 in ms, distinct message ids seen in the whole run).

const { Producer, Consumer, Message } = require('ali-ons');
const readline = require('readline');
const { httpclient, logger, parseArgs, emit, exit } = require('./common');

const args = parseArgs(process.argv.slice(2), {
  script: 'bench_shape.js',
  options: {
    role: 'producer|consumer', namesrv: 'HOST:PORT', topic: 'TOPIC', inflight: 'N',
    queues: 'Q', size: 'BYTES', group: 'GROUP',
  },
  required: ['role', 'namesrv', 'topic'],
  defaults: { inflight: '8', queues: '8', size: '1024' },
});

// wall-clock milliseconds with sub-millisecond resolution, on the clock Date.now() reads
const nowMs = () => performance.timeOrigin + performance.now();

function quantile(sorted, p) {
  if (!sorted.length) {
    return null;
  }
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

function commands(handlers) {
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', line => {
    const [ cmd, ...rest ] = line.trim().split(/\s+/);
    if (handlers[cmd]) {
      handlers[cmd](...rest.map(Number));
    }
  });
}

async function producer() {
  const p = new Producer({
    httpclient,
    logger,
    nameSrv: args.namesrv,
    producerGroup: args.group || 'benchmark_producer',
    instanceName: 'bench_producer',
  });
  p.on('error', err => console.error('[producer error]', err));
  await p.ready();
  const body = Buffer.alloc(Number(args.size), 'x');
  const doneAt = []; // answer times, epoch ms
  const rts = []; // round trips, ms, in the same order
  let failures = 0;
  let running = true;

  const message = () => {
    const msg = new Message(args.topic, body);
    delete msg.properties.TAGS; // no tag, as the benchmark Producer without -tc
    msg.keys = [ String(Math.floor(Date.now() / 1000)) ];
    return msg;
  };
  await p.send(message());
  emit({ event: 'ready' });

  const loop = async () => {
    while (running) {
      const started = nowMs();
      try {
        await p.send(message());
      } catch (err) {
        failures++;
        console.error('[send failed]', err.message);
        await new Promise(resolve => setTimeout(resolve, 3000)); // as the benchmark Producer
        continue;
      }
      const ended = nowMs();
      doneAt.push(ended);
      rts.push(ended - started);
    }
  };
  const loops = [];
  for (let i = 0; i < Number(args.inflight); i++) {
    loops.push(loop());
  }
  commands({
    stop() {
      running = false;
      Promise.all(loops).then(() => emit({ event: 'stopped' }));
    },
    report(t0, t1, w) {
      const inWindow = [];
      const windows = new Array(Math.max(1, Math.floor((t1 - t0) / (w * 1000)))).fill(0);
      for (let i = 0; i < doneAt.length; i++) {
        const t = doneAt[i];
        if (t >= t0 && t < t1) {
          inWindow.push(rts[i]);
          const k = Math.floor((t - t0) / (w * 1000));
          if (k < windows.length) {
            windows[k]++;
          }
        }
      }
      const sum = inWindow.reduce((a, b) => a + b, 0);
      inWindow.sort((a, b) => a - b);
      emit({
        event: 'report',
        acked: inWindow.length,
        failures,
        rt_avg_ms: inWindow.length ? sum / inWindow.length : null,
        rt_p50_ms: quantile(inWindow, 0.5),
        rt_p99_ms: quantile(inWindow, 0.99),
        window_counts: windows,
      });
      p.close().then(() => exit(0), () => exit(0));
    },
  });
}

async function consumer() {
  const c = new Consumer({
    httpclient,
    logger,
    nameSrv: args.namesrv,
    consumerGroup: args.group || 'benchmark_consumer',
    instanceName: 'bench_consumer',
  });
  c.on('error', err => console.error('[consumer error]', err));
  const receivedAt = [];
  const born = [];
  const seen = new Set();
  c.subscribe(args.topic, '*', async msg => {
    receivedAt.push(nowMs());
    born.push(msg.bornTimestamp);
    seen.add(msg.msgId);
  });
  await c.ready();
  // rebalance assigns the queues after ready; report ready once they are all held
  const queues = Number(args.queues);
  const deadline = Date.now() + 60000;
  while (c.processQueueTable.size < queues) {
    if (Date.now() > deadline) {
      throw new Error(`the consumer holds ${c.processQueueTable.size} of ${queues} queues after 60 s`);
    }
    await new Promise(resolve => setTimeout(resolve, 50));
  }
  emit({ event: 'ready' });
  commands({
    report(t0, t1) {
      const latencies = [];
      for (let i = 0; i < receivedAt.length; i++) {
        if (receivedAt[i] >= t0 && receivedAt[i] < t1) {
          latencies.push(receivedAt[i] - born[i]);
        }
      }
      latencies.sort((a, b) => a - b);
      emit({
        event: 'report',
        received: latencies.length,
        b2c_p50_ms: quantile(latencies, 0.5),
        b2c_p99_ms: quantile(latencies, 0.99),
        distinct_total: seen.size,
        received_total: receivedAt.length,
      });
      c.close().then(() => exit(0), () => exit(0));
    },
  });
}

const roles = { producer, consumer };
if (!roles[args.role]) {
  console.error(`unknown --role ${args.role}`);
  process.exit(64);
}
roles[args.role]().catch(err => {
  console.error(`bench_shape.js ${args.role} failed:`, err);
  exit(1);
});
