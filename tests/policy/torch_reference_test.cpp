// The policy's forward and backward against an independent PyTorch reimplementation
// (torch_reference.py, float64 autograd, Debian's /usr/bin/python3 with python3-torch).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "policy/model.h"

namespace moerl::policy {
namespace {

TEST(policy_vs_torch, logits_aux_loss_and_every_gradient_agree_with_pytorch) {
  model_config c;
  c.max_seq_len = 10;
  c.d_model = 24;
  c.num_layers = 2;
  c.num_heads = 3;
  c.num_experts = 6;
  c.top_k = 2;
  c.ffn_dim = 12;
  c.aux_loss_coef = 0.05f;
  c.seed = 11;
  auto ex = make_local_expert_exchange();
  auto pol = std::move(moe_policy::create(c, *ex)).value();
  std::mt19937_64 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : pol->params()) x += 0.05f * nd(rng);

  const int64_t b = 4, t = 9;
  std::uniform_int_distribution<int> tokd(0, num_vocab - 1);
  std::vector<token_id> tok(b * t);
  for (auto& x : tok) x = tokd(rng);
  std::vector<uint8_t> mask(b * t, 1);
  for (int i = 6; i < t; ++i) mask[1 * t + i] = 0;  // row 1 ends early; row 3 padded at its end
  mask[3 * t + 8] = 0;
  std::vector<float> r(b * t * num_vocab);
  for (auto& x : r) x = nd(rng);

  forward_state st;
  ASSERT_TRUE(pol->forward(tok, b, t, &st, mask).ok());
  std::vector<float> grads;
  ASSERT_TRUE(pol->backward(st, r, &grads).ok());

  nlohmann::json fx;
  fx["config"] = {{"d_model", c.d_model},
                  {"num_heads", c.num_heads},
                  {"num_layers", c.num_layers},
                  {"num_experts", c.num_experts},
                  {"top_k", c.top_k},
                  {"ffn_dim", c.ffn_dim},
                  {"aux_loss_coef", c.aux_loss_coef}};
  for (const auto& ts : pol->layout().tensors()) {
    auto b0 = pol->params().begin() + ts.offset;
    fx["params"][ts.name] = {{"dims", ts.dims}, {"data", std::vector<float>(b0, b0 + ts.size())}};
    auto g0 = grads.begin() + ts.offset;
    fx["grads"][ts.name] = std::vector<float>(g0, g0 + ts.size());
  }
  fx["tokens"] = tok;
  fx["mask"] = mask;
  fx["batch"] = b;
  fx["seq_len"] = t;
  fx["R"] = r;
  fx["logits"] = st.logits;
  fx["aux_loss"] = st.aux_loss;
  const std::string path = testing::TempDir() + "moerl_policy_torch_fixture.json";
  std::ofstream(path) << fx.dump();

  const std::string cmd =
      std::string("/usr/bin/python3 ") + MOERL_TORCH_REFERENCE + " " + path + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = pclose(pipe);
  std::printf("%s", out.c_str());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("all agree"), std::string::npos) << out;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moerl::policy
