#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/byte_codec.h"
#include "common/status_try.h"
#include "policy/adam.h"
#include "policy/params.h"
#include "policy/reward.h"

namespace moerl::policy {
namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'R', 'L', 'R', 'W', 'D'};

param_layout rm_layout(int64_t features, int64_t hidden) {
  param_layout l;
  l.add("rm.w1", {features, hidden});
  l.add("rm.b1", {hidden});
  l.add("rm.w2", {hidden});
  l.add("rm.b2", {1});
  return l;
}

}  // namespace

learned_reward_model::learned_reward_model(const task& t, int hidden)
    : task_(t), hidden_(hidden), num_positions_(t.prompt_length() + t.max_completion_length()) {
  params_.assign(rm_layout(int64_t(num_positions_) * num_vocab, hidden).num_floats(), 0.0f);
}

std::unique_ptr<learned_reward_model> learned_reward_model::create(const task& t, int hidden,
                                                                   uint64_t seed) {
  std::unique_ptr<learned_reward_model> m(new learned_reward_model(t, hidden));
  std::mt19937_64 rng(seed);
  // One-hot inputs: each hidden unit sums num_positions weights, so scale by that count.
  std::normal_distribution<float> w1(0.0f, 1.0f / std::sqrt(float(m->num_positions_)));
  std::normal_distribution<float> w2(0.0f, 1.0f / std::sqrt(float(hidden)));
  const size_t n1 = size_t(m->num_positions_) * num_vocab * hidden;
  for (size_t i = 0; i < n1; ++i) m->params_[i] = w1(rng);
  for (int h = 0; h < hidden; ++h) m->params_[n1 + hidden + h] = w2(rng);
  return m;
}

std::vector<int> learned_reward_model::active_features(
    const std::vector<token_id>& prompt, const std::vector<token_id>& completion) const {
  std::vector<int> f;
  const int P = task_.prompt_length(), C = task_.max_completion_length();
  for (int i = 0; i < P; ++i) f.push_back(i * num_vocab + prompt[i]);
  bool ended = false;
  for (int j = 0; j < C; ++j) {
    token_id tok = tok_pad;
    if (!ended && j < static_cast<int>(completion.size())) {
      tok = completion[j];
      if (tok < 0 || tok >= num_vocab) tok = tok_pad;  // scored as if absent
      ended = tok == tok_eos;
    }
    f.push_back((P + j) * num_vocab + tok);
  }
  return f;
}

double learned_reward_model::forward(const std::vector<int>& features,
                                     std::vector<float>* act) const {
  const size_t n1 = size_t(num_positions_) * num_vocab * hidden_;
  const float* w1 = params_.data();
  const float* b1 = w1 + n1;
  const float* w2 = b1 + hidden_;
  const float b2 = w2[hidden_];
  act->assign(b1, b1 + hidden_);
  for (int f : features)
    for (int h = 0; h < hidden_; ++h) (*act)[h] += w1[size_t(f) * hidden_ + h];
  double z = b2;
  for (int h = 0; h < hidden_; ++h) {
    (*act)[h] = std::tanh((*act)[h]);
    z += double((*act)[h]) * w2[h];
  }
  return 1.0 / (1.0 + std::exp(-z));
}

result<double> learned_reward_model::score(const std::vector<token_id>& prompt,
                                           const std::vector<token_id>& completion) const {
  auto valid = task_.solve(prompt);  // the same prompt checks as the verifier
  if (!valid) return valid.err();
  std::vector<float> act;
  return forward(active_features(prompt, completion), &act);
}

std::vector<token_id> learned_reward_model::perturbed_completion(const task_prompt& p,
                                                                 std::mt19937_64& rng) const {
  std::uniform_int_distribution<int> coin(0, 1), digit(0, 9);
  std::vector<token_id> c = p.target;
  for (size_t j = 0; j < c.size(); ++j)
    if (coin(rng)) c[j] = j + 1 < c.size() ? digit_token(digit(rng)) : tok_plus;
  return c;
}

result<double> learned_reward_model::fit(const reward_model& teacher, int num_steps, int batch_size,
                                         double learning_rate, uint64_t seed) {
  if (num_steps < 1 || batch_size < 1 || !(learning_rate > 0))
    return error{errc::invalid_argument, "reward model fit: steps, batch and rate must be > 0"};
  std::mt19937_64 rng(seed);
  adam_config ac;
  ac.learning_rate = learning_rate;
  ac.grad_clip = 0;
  adam opt(ac, params_.size());
  const size_t n1 = size_t(num_positions_) * num_vocab * hidden_;
  std::vector<float> grads(params_.size()), act;
  auto draw = [&](std::vector<int>* f, double* y) -> status {
    task_prompt p = task_.generate(rng);
    auto c = perturbed_completion(p, rng);
    ASSIGN_OR_RETURN(auto r, teacher.score(p.tokens, c));
    *y = r;
    *f = active_features(p.tokens, c);
    return ok_status();
  };
  for (int step = 0; step < num_steps; ++step) {
    std::fill(grads.begin(), grads.end(), 0.0f);
    for (int b = 0; b < batch_size; ++b) {
      std::vector<int> f;
      double y = 0;
      if (auto st = draw(&f, &y); !st) return st.err();
      const double out = forward(f, &act);
      const double dz = 2.0 * (out - y) * out * (1.0 - out) / batch_size;
      const float* w2 = params_.data() + n1 + hidden_;
      float* g1 = grads.data();
      float* gb1 = g1 + n1;
      float* gw2 = gb1 + hidden_;
      gw2[hidden_] += float(dz);
      for (int h = 0; h < hidden_; ++h) {
        gw2[h] += float(dz * act[h]);
        const float dh = float(dz * w2[h] * (1.0 - double(act[h]) * act[h]));
        gb1[h] += dh;
        for (int fi : f) g1[size_t(fi) * hidden_ + h] += dh;
      }
    }
    auto st = opt.step(params_, grads);
    if (!st) return st.err();
  }
  double mse = 0;
  const int held_out = 512;
  for (int i = 0; i < held_out; ++i) {
    std::vector<int> f;
    double y = 0;
    if (auto st = draw(&f, &y); !st) return st.err();
    const double e = forward(f, &act) - y;
    mse += e * e;
  }
  return mse / held_out;
}

status learned_reward_model::save(const std::string& path) const {
  byte_writer w;
  w.raw(kMagic, sizeof kMagic);
  w.str(task_.name());
  w.u32(static_cast<uint32_t>(task_.difficulty()));
  w.raw(serialize_params(rm_layout(int64_t(num_positions_) * num_vocab, hidden_), params_));
  const std::string& out = w.bytes();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return error{errc::io_error, "cannot open '" + path + "' for writing"};
  f.write(out.data(), out.size());
  if (!f) return error{errc::io_error, "writing '" + path + "' failed"};
  return ok_status();
}

result<std::unique_ptr<learned_reward_model>> learned_reward_model::load(const task& t,
                                                                         const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error{errc::io_error, "cannot open reward model checkpoint '" + path + "'"};
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  auto bad = [&](const std::string& what) {
    return error{errc::malformed_message, "reward model checkpoint '" + path + "': " + what};
  };
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return bad("does not start with MOERLRWD");
  byte_reader r(bytes.data() + sizeof kMagic, bytes.size() - sizeof kMagic);
  const uint32_t len = r.u32();
  if (len > 64 || bytes.size() < 16 + size_t(len)) return bad("truncated task name");
  const std::string name = r.raw(len);
  const uint32_t diff = r.u32();
  if (name != t.name() || int(diff) != t.difficulty())
    return error{errc::invalid_argument, "reward model checkpoint '" + path +
                                             "' was trained for task " + name + "/" +
                                             std::to_string(diff) + ", not " + t.name() + "/" +
                                             std::to_string(t.difficulty())};
  param_layout layout;
  auto data = deserialize_params(bytes.substr(bytes.size() - r.remaining()), nullptr, &layout);
  if (!data) return bad(data.err().message);
  const tensor_spec* b1 = layout.find("rm.b1");
  if (!b1 || b1->dims.size() != 1) return bad("has no rm.b1 tensor");
  const int hidden = static_cast<int>(b1->dims[0]);
  std::unique_ptr<learned_reward_model> m(new learned_reward_model(t, hidden));
  if (!(layout == rm_layout(int64_t(m->num_positions_) * num_vocab, hidden)))
    return bad("tensor shapes do not fit task " + t.name() + "/" + std::to_string(t.difficulty()));
  m->params_ = std::move(*data);
  return m;
}

}  // namespace moerl::policy
