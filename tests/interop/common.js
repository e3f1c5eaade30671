'use strict';

// Shared helpers of the ali-ons interop scripts (tests/test_interop_ali_ons.py drives them).

// ali-ons asserts that an `httpclient` is given even with `nameSrv`; it only calls it to
// resolve `onsAddr` (docs/protocol.md §11.3), which we never use.
const httpclient = {
  async request(url) {
    throw new Error(`interop scripts use nameSrv only; unexpected HTTP request to ${url}`);
  },
};

// ali-ons logs warnings and errors with console.*; keep stdout for our JSON lines.
// INTEROP_DEBUG=1 also shows ali-ons' info/debug logs (on stderr).
const verbose = !!process.env.INTEROP_DEBUG;
const logger = {
  info(...args) { if (verbose) console.error('[ali-ons info]', ...args); },
  debug(...args) { if (verbose) console.error('[ali-ons debug]', ...args); },
  warn(...args) { console.error('[ali-ons warn]', ...args); },
  error(...args) { console.error('[ali-ons error]', ...args); },
};

function parseArgs(argv, spec) {
  const out = Object.assign({}, spec.defaults);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      usage(spec, `unexpected argument ${arg}`);
    }
    const name = arg.slice(2);
    if (!(name in spec.options)) {
      usage(spec, `unknown option ${arg}`);
    }
    if (i + 1 >= argv.length) {
      usage(spec, `option ${arg} needs a value`);
    }
    out[name] = argv[++i];
  }
  for (const name of spec.required) {
    if (out[name] === undefined) {
      usage(spec, `option --${name} is required`);
    }
  }
  return out;
}

function usage(spec, problem) {
  console.error(`${problem}\nusage: node ${spec.script} ` +
    Object.entries(spec.options).map(([k, v]) => `--${k} ${v}`).join(' '));
  process.exit(64);
}

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

// Exit only once stdout has been flushed (it is a pipe when a test reads it).
function exit(code) {
  process.stdout.write('', () => process.exit(code));
}

// A hard deadline: whatever the client is doing, give up with exit code 3.
function hardTimeout(seconds, what) {
  const ms = Number(seconds) * 1000;
  if (!(ms > 0)) {
    console.error(`bad --timeout ${seconds}`);
    process.exit(64);
  }
  const timer = setTimeout(() => {
    console.error(`${what}: hard timeout of ${seconds} s reached`);
    exit(3);
  }, ms);
  timer.unref();
  return timer;
}

module.exports = { httpclient, logger, parseArgs, emit, exit, hardTimeout };
