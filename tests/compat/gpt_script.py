"""A character-level GPT written for PyTorch, as the lectures and minimal-GPT repositories
write one; tests/compat/test_gpt_script.py runs it on minitorch_exp with only its import
lines changed, and on PyTorch where installed.

The harness provides ``share_weights(model)`` (the same initial weights in both
libraries). Batches are picked by arithmetic, not drawn, so both libraries see the
same ones. Half the blocks attend by hand (a ``register_buffer``'d triangle,
``masked_fill`` with -inf, ``softmax``), half with ``F.scaled_dot_product_attention``.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT = (
    "Now is the winter of our discontent made glorious summer by this sun of york; "
    "and all the clouds that lour'd upon our house in the deep bosom of the ocean buried. "
    "Now are our brows bound with victorious wreaths; our bruised arms hung up for monuments."
)
BLOCK_SIZE, BATCH, N_EMBD, N_HEAD, N_LAYER, STEPS = 16, 4, 32, 4, 2, 8

chars = sorted(set(TEXT))
stoi = {c: i for i, c in enumerate(chars)}
itos = {i: c for c, i in stoi.items()}
data = torch.tensor([stoi[c] for c in TEXT], dtype=torch.long)


def get_batch(step):
    ix = [(step * 37 + i * 53) % (len(data) - BLOCK_SIZE - 1) for i in range(BATCH)]
    x = torch.stack([data[i:i + BLOCK_SIZE] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + BLOCK_SIZE] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, use_sdpa):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.use_sdpa = use_sdpa
        mask = torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE))
        self.register_buffer("bias", mask.view(1, 1, BLOCK_SIZE, BLOCK_SIZE))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, use_sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD)
        self.attn = CausalSelfAttention(use_sdpa)
        self.ln_2 = nn.LayerNorm(N_EMBD)
        self.mlp = nn.Sequential(nn.Linear(N_EMBD, 4 * N_EMBD), nn.GELU(),
                                 nn.Linear(4 * N_EMBD, N_EMBD))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, N_EMBD)
        self.wpe = nn.Embedding(BLOCK_SIZE, N_EMBD)
        self.blocks = nn.ModuleList([Block(use_sdpa=i % 2 == 1) for i in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0):
    model.eval()
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -BLOCK_SIZE:])
        probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    model.train()
    return idx


torch.manual_seed(0)
model = GPT(len(chars))
share_weights(model)  # noqa: F821  (the harness's)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)

losses = []
for step in range(STEPS):
    xb, yb = get_batch(step)
    _, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("losses", [f"{v:.4f}" for v in losses])
