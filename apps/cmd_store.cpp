// `moerl store`: look into the durable plane the way a node sees it (same config, same
// credentials): list keys, print or write an object, remove one, and show which
// checkpoint a resume would pick. Exit 2 on bad input (config, key), 1 on other failures.
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include <CLI/CLI.hpp>

#include "apps/commands.h"
#include "common/config.h"
#include "store/checkpoint.h"
#include "store/object_store.h"

namespace moerl::apps {
namespace {

struct store_cli {
  std::string config_file;
  std::vector<std::string> overrides;
  std::string url;
  std::string arg1, arg2;
  bool as_json = false;
};

[[noreturn]] void fail(const error& e) {
  std::cerr << "moerl store: " << e.to_string() << "\n";
  const bool bad_input = e.code == errc::invalid_argument || e.code == errc::invalid_config;
  throw CLI::RuntimeError(bad_input ? 2 : 1);
}

std::unique_ptr<store::object_store> open_from(const store_cli& o) {
  auto cfg = config::load(o.config_file, o.overrides);
  if (!cfg) fail(cfg.err());
  auto s = store::open_store(o.url.empty() ? cfg->get_string("store.url") : o.url, cfg.value());
  if (!s) fail(s.err());
  return std::move(s.value());
}

CLI::App* add_verb(CLI::App* cmd, const char* name, const char* help,
                   const std::shared_ptr<store_cli>& o) {
  auto* v = cmd->add_subcommand(name, help);
  v->add_option("--url", o->url, "store URL (default: store.url from the config)");
  v->add_option("--config", o->config_file, "YAML config file");
  v->add_option("--set", o->overrides, "config override key=value (repeatable)");
  return v;
}

}  // namespace

void add_store_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("store", "inspect the object store (durable plane)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<store_cli>();

  auto* ls = add_verb(cmd, "ls", "list keys under a prefix, sorted", o);
  ls->add_option("prefix", o->arg1, "key prefix (default: everything)");
  ls->callback([o] {
    auto s = open_from(*o);
    auto keys = s->list(o->arg1);
    if (!keys) fail(keys.err());
    for (const auto& k : keys.value()) std::cout << k << "\n";
  });

  auto* cat = add_verb(cmd, "cat", "write an object's bytes to stdout", o);
  cat->add_option("key", o->arg1, "object key")->required();
  cat->callback([o] {
    auto s = open_from(*o);
    auto bytes = s->get(o->arg1);
    if (!bytes) fail(bytes.err());
    std::cout.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  });

  auto* put = add_verb(cmd, "put", "store a local file's bytes under a key", o);
  put->add_option("key", o->arg1, "object key")->required();
  put->add_option("file", o->arg2, "local file")->required()->check(CLI::ExistingFile);
  put->callback([o] {
    std::ifstream in(o->arg2, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) fail(error(errc::io_error, "cannot read " + o->arg2));
    auto s = open_from(*o);
    if (auto st = s->put(o->arg1, bytes); !st) fail(st.err());
    std::cout << "stored " << bytes.size() << " bytes as " << o->arg1 << " in " << s->describe()
              << "\n";
  });

  auto* rm = add_verb(cmd, "rm", "remove an object (a missing key is not an error)", o);
  rm->add_option("key", o->arg1, "object key")->required();
  rm->callback([o] {
    auto s = open_from(*o);
    if (auto st = s->remove(o->arg1); !st) fail(st.err());
  });

  auto* ck =
      add_verb(cmd, "checkpoints", "committed checkpoint steps and the one a resume would use", o);
  ck->add_option("prefix", o->arg1, "checkpoint prefix, e.g. runs/r1/ckpt")->required();
  ck->add_flag("--json", o->as_json, "print as JSON");
  ck->callback([o] {
    auto s = open_from(*o);
    auto steps = store::committed_steps(*s, o->arg1);
    if (!steps) fail(steps.err());
    auto latest = store::latest_committed(*s, o->arg1);
    if (!latest && latest.err().code != errc::not_found) fail(latest.err());
    if (o->as_json) {
      nlohmann::json j = {
          {"store", s->describe()}, {"prefix", o->arg1}, {"committed_steps", steps.value()}};
      if (latest) {
        j["latest"] = {{"step", latest->step},
                       {"content_hash", latest->content_hash},
                       {"parts", latest->parts.size()},
                       {"meta", latest->meta}};
      } else {
        j["latest"] = nullptr;
      }
      std::cout << j.dump(2) << "\n";
      return;
    }
    std::cout << "committed steps:";
    for (auto st : steps.value()) std::cout << " " << st;
    std::cout << "\n";
    if (latest) {
      std::cout << "latest intact: step " << latest->step << ", " << latest->parts.size()
                << " parts, content " << latest->content_hash << "\n";
    } else {
      std::cout << "latest intact: none\n";
    }
  });
}

}  // namespace moerl::apps
